//! A bound flow's revisions (docs/bound-flows.md#revisions): each change of what decides how
//! its objects are served makes an immutable revision, kept as Kubernetes keeps a DaemonSet's
//! or a StatefulSet's: an `apps/v1` ControllerRevision owned by the flow, named
//! `<flow>-<hash>`, whose `data` is all an object needs to be served with it again (the
//! flow's spec but for what picks the objects, [`data`]), numbered, and pruned past the flow's
//! history limit ([`history`]). Each object's record names the revision that last served it
//! (a child's [`REVISION_ANNOTATION`], the served mark's `v`), and the flow's status counts its
//! objects per revision ([`counts`]).

pub mod counts;
pub mod history;
pub mod seal;

use std::collections::BTreeMap;

use pseudoflow_crd::protocol::names::sha256_hex;
use pseudoflow_crd::status::BoundSummary;
use serde_json::{json, Value};

pub use pseudoflow_crd::rollout::{REVISION_ANNOTATION, REVISION_HASH_LABEL, REVISION_OF_LABEL};

/// Hex characters of SHA-256 a revision's hash keeps: 128 bits, so no one who may edit the flow
/// can make two specs share a revision (its data is compared as well).
const HASH_HEX: usize = 32;
/// Longest object name (a ControllerRevision's name is a DNS subdomain).
const MAX_NAME: usize = 253;

/// What a revision holds: the bound flow's spec (`spec`, as written) without what picks its
/// objects (`bind.selector`, `bind.allNamespaces`), whether runs start (`suspend`) and how
/// revisions are kept and rolled out (`rollout`), as a DaemonSet's revision holds its pod
/// template and not its selector or update strategy. Everything else decides how an object is
/// served (its steps, `onDelete`, `vars`, options, ServiceAccount, what it writes back and
/// watches), so a change of any of it is a new revision.
pub fn data(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Some(o) = s.as_object_mut() {
        for k in ["suspend", "rollout", "bound"] {
            o.remove(k);
        }
    }
    if let Some(b) = s.get_mut("bind").and_then(Value::as_object_mut) {
        b.remove("selector");
        b.remove("allNamespaces");
    }
    json!({ "spec": s })
}

/// The hash of the revision of `spec` (hex, [`HASH_HEX`] characters): SHA-256 over its
/// [`data`] as compact JSON (keys sorted).
pub fn hash(spec: &Value) -> String {
    hash_of_data(&data(spec))
}

/// The hash of a revision's `data` as stored.
pub fn hash_of_data(data: &Value) -> String {
    let mut d = sha256_hex(&[&data.to_string()]);
    d.truncate(HASH_HEX);
    d
}

/// The ControllerRevision's name for flow `flow`'s revision `hash`: `<flow>-<hash>` (the flow's
/// name cut to fit), so the name ends with the whole hash.
pub fn name(flow: &str, hash: &str) -> String {
    let room = MAX_NAME - hash.len() - 1;
    let base: String = flow.chars().take(room).collect();
    format!("{}-{hash}", base.trim_end_matches('-'))
}

/// The flow's summary `s` with its current revision and its objects per revision (`by_hash`:
/// objects per the hash of the revision that last served them).
pub fn counted(
    mut s: BoundSummary,
    h: &history::History,
    by_hash: &BTreeMap<String, u32>,
) -> BoundSummary {
    s.current_revision = h.current().map(|c| c.name.clone());
    s.revisions = counts::listed(&h.all, h.current.as_deref(), by_hash);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Value {
        json!({"serviceAccountName": "flow", "steps": [{"type": "log", "message": "a"}],
            "bind": {"apiVersion": "example.com/v1", "kind": "Gadget", "selector": "tier=dev",
                "record": "Object"}})
    }

    #[test]
    fn a_change_of_steps_is_a_new_revision_and_selecting_suspending_or_rolling_out_is_not() {
        let h = hash(&spec());
        assert_eq!(h.len(), HASH_HEX);
        let mut steps = spec();
        steps["steps"][0]["message"] = json!("b");
        assert_ne!(hash(&steps), h, "a step");
        let mut sa = spec();
        sa["serviceAccountName"] = json!("other");
        assert_ne!(hash(&sa), h, "the ServiceAccount its steps run as");
        let mut fields = spec();
        fields["bind"]["watchFields"] = json!([".metadata.labels.x"]);
        assert_ne!(hash(&fields), h, "what starts a run");
        let mut same = spec();
        same["bind"]["selector"] = json!("tier=prod");
        same["bind"]["allNamespaces"] = json!(true);
        same["suspend"] = json!(true);
        same["rollout"] = json!({"revisionHistoryLimit": 2});
        assert_eq!(hash(&same), h);
        assert_eq!(data(&same), data(&spec()));
        assert!(data(&spec())["spec"]["bind"].get("selector").is_none());
        assert_eq!(hash_of_data(&data(&spec())), h);
    }

    #[test]
    fn a_name_ends_with_the_whole_hash_and_is_a_subdomain() {
        let h = hash(&spec());
        assert_eq!(name("gadgets", &h), format!("gadgets-{h}"));
        let long = "a".repeat(300);
        let n = name(&long, &h);
        assert!(n.len() <= MAX_NAME && n.ends_with(&format!("-{h}")), "{n}");
    }
}
