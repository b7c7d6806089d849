//! `get` of a bound flow recorded in its objects (`bind.record: Object`): it keeps no child flow,
//! so each object's row is read from the object itself — its status (what the controller's
//! `write_back` writes: phase field, `message`, conditions with their times) and this flow's
//! served mark annotation. Listed with the CLI user's own rights, a page at a time.

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::{pinned_kind, ApiResource, Scope};
use pseudoflow_crd::bind::Bind;
use pseudoflow_crd::protocol::served::mark_key;
use pseudoflow_crd::selector::Selector;
use serde_json::Value;

use crate::cluster::Kube;
use crate::escape::printable;
use crate::revision::RevisionNumbers;
use crate::show::human;

/// Items per LIST request, as the controller reads the objects.
const PAGE: u32 = 100;
/// What the FLOW column shows: there is no child flow.
pub const IN_OBJECT: &str = "(in object)";

/// One object's row: OBJECT, FLOW, PHASE, LAST RUN, REVISION, MESSAGE; and whether this flow
/// served it.
pub struct ObjectRow {
    /// The columns.
    pub cells: [String; 6],
    /// Whether the object carries this flow's served mark (else it is `Pending`).
    pub served: bool,
}

/// The objects the bound flow (namespace `ns`, uid `flow_uid`, binding `bind`) serves, or a line
/// saying why they cannot be read (a right the user lacks, a kind not served).
pub async fn rows(
    k: &Kube,
    flow: &str,
    flow_uid: &str,
    bind: &Bind,
    numbers: &RevisionNumbers,
) -> Result<Vec<ObjectRow>, String> {
    let (client, ns) = (&k.client, k.namespace.as_str());
    let (group, version) = bind.group_version();
    let gvk = GroupVersionKind::gvk(group, version, &bind.kind);
    let (ar, caps) = pinned_kind(client, &gvk).await.map_err(|e| {
        let what = format!("{}/{}", bind.api_version, bind.kind);
        refused(
            &e,
            &format!("discover the kind {what}"),
            "get",
            "its API group",
        )
    })?;
    let scope = (caps.scope == Scope::Namespaced && !bind.all_namespaces).then_some(ns);
    let selector = match &bind.selector {
        Some(s) => s.parse().map_err(|e| format!("spec.bind.selector: {e}"))?,
        None => Selector(vec![]),
    };
    let key = mark_key(ns, flow);
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let keep = |o: DynamicObject| {
        let labels = o.metadata.labels.clone().unwrap_or_default();
        selector
            .matches(&labels)
            .then(|| row(&o, (&key, flow_uid), bind, numbers, now))
    };
    let mut out = list_kept(client, &ar, scope, keep).await.map_err(|e| {
        let resource = resource_name(&ar);
        let place = match scope {
            Some(ns) => format!("in namespace {ns}"),
            None => "in every namespace".into(),
        };
        refused(&e, &format!("list {resource} {place}"), "list", &resource)
    })?;
    out.sort_by(|a, b| a.cells[0].cmp(&b.cells[0]));
    Ok(out)
}

/// `plural.group` (or `plural` for the core group), as RBAC names it.
fn resource_name(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// Why `what` failed: for a 403, the right the user lacks; else the error.
fn refused(e: &kube::Error, what: &str, verb: &str, resource: &str) -> String {
    match e {
        kube::Error::Api(s) if s.is_forbidden() => format!(
            "cannot {what}: you lack the right to {verb} {resource} (ask for `{verb}` on \
             {resource}); the objects' rows are not shown"
        ),
        e => format!("cannot {what}: {e}"),
    }
}

/// Every object of `ar` in `scope` (every namespace: `None`), a page at a time, `keep` applied
/// to each as its page comes (only the rows are held, never every object in full).
async fn list_kept<T>(
    client: &kube::Client,
    ar: &ApiResource,
    scope: Option<&str>,
    mut keep: impl FnMut(DynamicObject) -> Option<T>,
) -> Result<Vec<T>, kube::Error> {
    let api: Api<DynamicObject> = match scope {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(PAGE);
        if let Some(t) = token.take() {
            lp = lp.continue_token(&t);
        }
        let list = api.list(&lp).await?;
        out.extend(list.items.into_iter().filter_map(&mut keep));
        match list.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(t) => token = Some(t),
            None => return Ok(out),
        }
    }
}

/// `namespace/name` of `o` (`name` for a cluster-scoped kind), as the controller names it.
fn object_key(o: &DynamicObject) -> String {
    let name = o.metadata.name.clone().unwrap_or_default();
    match o.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name,
    }
}

/// The mark of flow `flow_uid` under `key` on `o`, if it names `o` itself (a mark copied from
/// another object, or left by an earlier flow of this name, counts as none, as for the
/// controller).
fn marked(o: &DynamicObject, key: &str, flow_uid: &str) -> Option<Value> {
    let raw = o.metadata.annotations.as_ref().and_then(|a| a.get(key));
    let mark = raw.and_then(|r| serde_json::from_str::<Value>(r).ok())?;
    let uid = o.metadata.uid.as_deref().unwrap_or_default();
    (mark["f"].as_str() == Some(flow_uid) && mark["u"].as_str() == Some(uid)).then_some(mark)
}

/// The row of object `o` at `now` (seconds), for the flow's mark `key` and uid.
fn row(
    o: &DynamicObject,
    (key, flow_uid): (&str, &str),
    bind: &Bind,
    numbers: &RevisionNumbers,
    now: i64,
) -> ObjectRow {
    let status = o.data.get("status").cloned().unwrap_or(Value::Null);
    let mark = marked(o, key, flow_uid);
    let served = mark.is_some();
    // The revision that last served it (the mark's `v`).
    let revision = numbers.shown(mark.as_ref().and_then(|m| m["v"].as_str()));
    let phase = if served {
        object_phase(&status, &bind.status.phase_field)
    } else {
        "Pending".to_string()
    };
    let last = last_run(&status)
        .map(|t| format!("{} ago", human(now - t)))
        .filter(|_| served)
        .unwrap_or_else(|| "-".into());
    // A successful run's message says nothing the phase does not.
    let message = match phase.as_str() {
        "Failed" => status["message"].as_str().unwrap_or_default().to_string(),
        _ => String::new(),
    };
    // Whoever may write the object's status writes these: no escape reaches the terminal.
    let cells = [
        object_key(o),
        IN_OBJECT.into(),
        printable(&phase),
        last,
        revision,
        printable(&message),
    ];
    ObjectRow { cells, served }
}

/// The phase the object's status shows: the flow's phase field, else its Ready condition's
/// reason (which the controller writes as the phase), else `Unknown`.
fn object_phase(status: &Value, phase_field: &str) -> String {
    let declared = (!phase_field.is_empty())
        .then(|| status[phase_field].as_str())
        .flatten();
    declared
        .or_else(|| ready(status).and_then(|c| c["reason"].as_str()))
        .unwrap_or("Unknown")
        .to_string()
}

/// The object's `Ready` condition.
fn ready(status: &Value) -> Option<&Value> {
    let conds = status["conditions"].as_array()?;
    conds.iter().find(|c| c["type"] == "Ready")
}

/// When the object's status was last written (its conditions' latest `lastTransitionTime`, in
/// seconds): the controller stamps every condition at each run's end.
fn last_run(status: &Value) -> Option<i64> {
    let conds = status["conditions"].as_array()?;
    conds
        .iter()
        .filter_map(|c| c["lastTransitionTime"].as_str())
        .filter_map(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|t| t.as_second())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bind() -> Bind {
        serde_json::from_value(json!({"apiVersion": "x.example.com/v1", "kind": "Thing",
            "record": "Object"}))
        .unwrap()
    }

    fn object(annotations: Value, status: Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "x.example.com/v1", "kind": "Thing",
            "metadata": {"name": "a", "namespace": "ops", "uid": "obj-1",
                "annotations": annotations}, "status": status}))
        .unwrap()
    }

    /// The revision numbers of a status listing revision 2 (`h2`).
    fn numbers() -> RevisionNumbers {
        let st = json!({"bound": {"objects": 1, "creating": 0, "running": 0, "failed": 1,
            "revisions": [{"revision": 2, "name": "things-h2", "objects": 1}]}});
        RevisionNumbers::of(&serde_json::from_value(st).unwrap())
    }

    fn failed_status() -> Value {
        json!({"phase": "Failed", "message": "spec.steps[0]: boom", "conditions": [
            {"type": "Ready", "status": "False", "reason": "Failed",
                "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Degraded", "status": "True", "reason": "Failed",
                "lastTransitionTime": "2026-01-01T00:00:10Z"}]})
    }

    #[test]
    fn a_served_failed_object_shows_its_phase_time_and_message() {
        let key = mark_key("ops", "things");
        let mark = json!({"f": "flow-1", "g": 1, "u": "obj-1", "x": true, "v": "h2"}).to_string();
        let o = object(json!({&key: mark}), failed_status());
        let now = "2026-01-01T00:01:10Z".parse::<k8s_openapi::jiff::Timestamp>();
        let r = row(
            &o,
            (&key, "flow-1"),
            &bind(),
            &numbers(),
            now.unwrap().as_second(),
        );
        assert!(r.served);
        assert_eq!(
            r.cells,
            [
                "ops/a",
                IN_OBJECT,
                "Failed",
                "1m0s ago",
                "2",
                "spec.steps[0]: boom"
            ]
            .map(String::from)
        );
    }

    #[test]
    fn without_this_flows_mark_naming_the_object_it_is_pending() {
        let key = mark_key("ops", "things");
        for ann in [
            json!({}),
            json!({&key: json!({"f": "other-flow", "u": "obj-1"}).to_string()}),
            json!({&key: json!({"f": "flow-1", "u": "copied-from-another"}).to_string()}),
            json!({&key: "not json"}),
        ] {
            let r = row(
                &object(ann, failed_status()),
                (&key, "flow-1"),
                &bind(),
                &numbers(),
                0,
            );
            assert!(!r.served);
            assert_eq!(r.cells[2..], ["Pending", "-", "-", ""].map(String::from));
        }
    }

    #[test]
    fn without_a_phase_field_the_ready_conditions_reason_is_the_phase() {
        let st = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Running"}]});
        assert_eq!(object_phase(&st, ""), "Running");
        assert_eq!(object_phase(&st, "phase"), "Running", "no phase written");
        assert_eq!(object_phase(&json!({"state": "Failed"}), "state"), "Failed");
        assert_eq!(object_phase(&json!({}), "phase"), "Unknown");
    }

    /// Attack: whoever may write an object's status (or put text into a step's failure) writes
    /// terminal escapes or a newline into its phase or message, to rewrite what the operator's
    /// terminal shows (a fake row, a changed title); or into the revision its served mark names
    /// (anyone who may edit the object may write its annotations).
    #[test]
    fn attack_control_characters_in_an_objects_status_are_shown_escaped() {
        let key = mark_key("ops", "things");
        let mark = json!({"f": "flow-1", "u": "obj-1", "v": "\u{1b}[2Jh"}).to_string();
        let failed = json!({"phase": "Failed",
            "message": "boom\u{1b}]0;owned\u{7}\nops/z   (in object)   Running"});
        let odd = json!({"phase": "Running\u{1b}[2J"});
        let rows = [failed, odd].map(|st| {
            let o = object(json!({&key: mark.clone()}), st);
            row(&o, (&key, "flow-1"), &bind(), &numbers(), 0).cells
        });
        for cell in rows.iter().flatten() {
            assert!(!cell.chars().any(char::is_control), "{cell:?}");
        }
        assert_eq!(rows[0][4], "\\u{1b}[2Jh");
        let m = &rows[0][5];
        assert!(m.starts_with("boom\\u{1b}]0;owned\\u{7}\\nops/z"), "{m}");
        assert_eq!(rows[1][2], "Running\\u{1b}[2J");
    }

    #[test]
    fn a_403_names_the_right_that_is_missing() {
        let e = kube::Error::Api(Box::new(
            serde_json::from_value(json!({"status": "Failure", "message": "forbidden",
                "reason": "Forbidden", "code": 403}))
            .unwrap(),
        ));
        let line = refused(&e, "list things.x in namespace ops", "list", "things.x");
        assert!(
            line.contains("you lack the right to list things.x"),
            "{line}"
        );
    }
}
