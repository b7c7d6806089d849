//! `bind.related`: other objects each bound object names (seed 002's source Secret, seed 003's
//! values ConfigMap), templated from `${object}`. The bound flow reads each as its
//! ServiceAccount when it looks at the object; a change of one's content (anything but its
//! metadata and status) starts a new run of the object's flow, whose `${trigger}` names it.
//!
//! What the child records in `spec.bound.related` (or, recorded in the object, its served mark:
//! [`super::served`]) is each related object's resourceVersion, never its content (a Secret's
//! data must not reach a PseudoFlow, nor the object's annotations). Whether a new version
//! changed the content is decided with a digest kept in the controller's memory only; after a
//! restart, a new version counts as a change (at most one extra run per object).

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use kube::api::DynamicObject;
use pseudoflow_compiler::expr::{Engine, Scope};
use pseudoflow_crd::bind::{RelatedRef, OBJECT_VAR};
use serde_json::{json, Value};

/// A related reference rendered for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Its index in `bind.related`.
    pub index: usize,
    /// How `${trigger.changed}` and `spec.bound.related` name it: `Kind/name`, or
    /// `Kind/namespace/name` when it is not in the object's namespace.
    pub key: String,
    /// Its namespace (the object's unless the flow names another, which only `allNamespaces`
    /// flows may); `None` for an object without a namespace (a cluster-scoped bound kind).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// Renders every reference over `view` (the object as `${object}` shows it). Two references
/// that name the same object give it once: a reference with a fallback (seed 003's values
/// ConfigMap, `${object.spec.get('values') or object.spec.repo}`) may name what another does,
/// and one object is one change in `${trigger.changed}`.
pub fn resolve(
    engine: &Engine,
    refs: &[RelatedRef],
    view: &Value,
) -> Result<Vec<Resolved>, String> {
    let scope: Scope = [(OBJECT_VAR.to_string(), view.clone())]
        .into_iter()
        .collect();
    let own_ns = view["metadata"]["namespace"].as_str().map(str::to_string);
    let mut out = Vec::new();
    for (index, r) in refs.iter().enumerate() {
        let render = |field: &str, text: &str| -> Result<String, String> {
            let path = format!("spec.bind.related[{index}].{field}");
            let (v, _) = engine
                .substitute_str(text, &scope, &path)
                .map_err(|e| e.to_string())?;
            match v {
                Value::String(s) if valid_name(&s) => Ok(s),
                other => Err(format!("{path}: {text} gave {other}, not an object name")),
            }
        };
        let name = render("name", &r.name)?;
        let namespace = match &r.namespace {
            Some(ns) => Some(render("namespace", ns)?),
            None => own_ns.clone(),
        };
        let key = if namespace == own_ns {
            format!("{}/{name}", r.kind)
        } else {
            format!(
                "{}/{}/{name}",
                r.kind,
                namespace.as_deref().unwrap_or_default()
            )
        };
        if out.iter().any(|o: &Resolved| o.key == key) {
            continue;
        }
        out.push(Resolved {
            index,
            key,
            namespace,
            name,
        });
    }
    Ok(out)
}

/// A name an API path can take: a DNS subdomain (so never `..` or a `/`).
fn valid_name(s: &str) -> bool {
    pseudoflow_crd::text::is_dns_subdomain(s)
}

/// A digest of what counts as the object's content: every top-level field but `metadata`,
/// `status`, `apiVersion` and `kind` (a Secret's `type` and `data`, a ConfigMap's `data`, a
/// custom object's `spec`). 0 stands for "absent".
pub fn content_digest(obj: Option<&DynamicObject>) -> u64 {
    let Some(obj) = obj else {
        return 0;
    };
    let mut content: BTreeMap<&str, &Value> = BTreeMap::new();
    if let Some(fields) = obj.data.as_object() {
        for (k, v) in fields {
            if !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind") {
                content.insert(k, v);
            }
        }
    }
    let mut h = DefaultHasher::new();
    serde_json::to_string(&content)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish().max(1)
}

/// What one related object is now: its resourceVersion ("" when absent) and content digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelatedSeen {
    /// Its resourceVersion ("" when absent).
    pub version: String,
    /// Its [`content_digest`].
    pub digest: u64,
}

/// Whether the related object `key` changed for a child made with `recorded` versions (its
/// `spec.bound.related`), given the digest remembered for it (`None`: not known, e.g. after a
/// restart). A new version whose content is unchanged (a label, an annotation, a status write)
/// is no change; a new version of unknown content is one.
pub fn changed(
    recorded: &BTreeMap<String, String>,
    key: &str,
    now: &RelatedSeen,
    remembered: Option<&RelatedSeen>,
) -> bool {
    let Some(version) = recorded.get(key) else {
        // Not recorded: the reference is new (a spec change, which runs anyway) or the object
        // appeared since the child was made without it.
        return now.digest != 0;
    };
    if *version == now.version {
        return false;
    }
    match remembered {
        Some(seen) => seen.digest != now.digest,
        None => true,
    }
}

/// `trigger` (what the object's own change starts, if anything) with the related objects that
/// `changed` (their keys) added: an update naming them when nothing else changed, the object's
/// own update naming them too; a create stays a create. Both ways of recording use it.
pub fn with_changes(trigger: Option<Value>, changed: Vec<String>) -> Option<Value> {
    if changed.is_empty() {
        return trigger;
    }
    match trigger {
        None => Some(json!({"event": "update", "changed": changed})),
        Some(mut t) if t["event"] == "update" => {
            if let Some(list) = t["changed"].as_array_mut() {
                list.extend(changed.into_iter().map(Value::String));
            }
            Some(t)
        }
        Some(t) => Some(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refs(v: Value) -> Vec<RelatedRef> {
        serde_json::from_value(v).unwrap()
    }

    fn view() -> Value {
        json!({"metadata": {"name": "sync", "namespace": "ops"},
            "spec": {"secretName": "registry", "from": "other", "bad": "../etc"}})
    }

    #[test]
    fn references_render_from_the_object_in_its_namespace() {
        let engine = Engine::default();
        let r = refs(json!([{"apiVersion": "v1", "kind": "Secret",
            "name": "${object.spec.secretName}"}]));
        let got = resolve(&engine, &r, &view()).unwrap();
        assert_eq!(
            got,
            [Resolved {
                index: 0,
                key: "Secret/registry".into(),
                namespace: Some("ops".into()),
                name: "registry".into()
            }]
        );
        // Only allNamespaces flows have a `namespace` (validated); then the key names it.
        let r = refs(json!([{"apiVersion": "v1", "kind": "Secret", "name": "x",
            "namespace": "${object.spec.from}"}]));
        let got = resolve(&engine, &r, &view()).unwrap();
        assert_eq!(got[0].key, "Secret/other/x");
        assert_eq!(got[0].namespace.as_deref(), Some("other"));
    }

    #[test]
    fn two_references_naming_one_object_give_it_once() {
        let engine = Engine::default();
        let r = refs(json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "${object.spec.secretName}"},
            {"apiVersion": "v1", "kind": "ConfigMap",
                "name": "${object.spec.get('values') or object.spec.secretName}"},
            {"apiVersion": "v1", "kind": "Secret", "name": "${object.spec.secretName}"}]));
        let got = resolve(&engine, &r, &view()).unwrap();
        let keys: Vec<(usize, &str)> = got.iter().map(|g| (g.index, g.key.as_str())).collect();
        assert_eq!(keys, [(0, "ConfigMap/registry"), (2, "Secret/registry")]);
    }

    #[test]
    fn a_name_that_is_not_an_object_name_is_refused_naming_the_reference() {
        let engine = Engine::default();
        for name in ["${object.spec.bad}", "${object.spec.missing}", ""] {
            let r = refs(json!([{"apiVersion": "v1", "kind": "Secret", "name": name}]));
            let e = resolve(&engine, &r, &view()).unwrap_err();
            assert!(e.contains("spec.bind.related[0].name"), "{name}: {e}");
        }
    }

    fn object(data: Value, labels: Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "labels": labels, "resourceVersion": "7"},
            "type": "Opaque", "data": data, "status": {"x": 1}}))
        .unwrap()
    }

    #[test]
    fn the_digest_covers_content_not_metadata() {
        let a = object(json!({"k": "MQ=="}), json!({}));
        let relabelled = object(json!({"k": "MQ=="}), json!({"x": "y"}));
        let edited = object(json!({"k": "Mg=="}), json!({}));
        let d = content_digest(Some(&a));
        assert_ne!(d, 0);
        assert_eq!(d, content_digest(Some(&relabelled)));
        assert_ne!(d, content_digest(Some(&edited)));
        assert_eq!(content_digest(None), 0);
    }

    #[test]
    fn a_new_version_is_a_change_only_when_the_content_changed_or_is_unknown() {
        let recorded: BTreeMap<String, String> = [("Secret/s".to_string(), "7".to_string())].into();
        let seen = |version: &str, digest| RelatedSeen {
            version: version.into(),
            digest,
        };
        let was = seen("7", 11);
        assert!(!changed(&recorded, "Secret/s", &seen("7", 11), Some(&was)));
        assert!(!changed(&recorded, "Secret/s", &seen("8", 11), Some(&was)));
        assert!(changed(&recorded, "Secret/s", &seen("8", 12), Some(&was)));
        assert!(changed(&recorded, "Secret/s", &seen("8", 11), None));
        assert!(!changed(&recorded, "Secret/s", &seen("7", 11), None));
        // Absent when the child was made, there now: a change; still absent: none.
        let none = BTreeMap::new();
        assert!(changed(&none, "Secret/s", &seen("3", 11), None));
        assert!(!changed(&none, "Secret/s", &seen("", 0), None));
    }

    #[test]
    fn related_changes_make_an_update_naming_them_and_a_create_stays_a_create() {
        let changed = || vec!["Secret/s".to_string()];
        assert_eq!(with_changes(None, vec![]), None);
        assert_eq!(
            with_changes(None, changed()),
            Some(json!({"event": "update", "changed": ["Secret/s"]}))
        );
        let own = json!({"event": "update", "changed": [".spec.size"]});
        assert_eq!(
            with_changes(Some(own), changed()),
            Some(json!({"event": "update", "changed": [".spec.size", "Secret/s"]}))
        );
        let create = json!({"event": "create", "changed": []});
        assert_eq!(with_changes(Some(create.clone()), changed()), Some(create));
    }
}
