//! What a child flow sees of its object (`${object...}`), and the finalizer the bound flow puts
//! on each object so that deleting it first runs its `onDelete`.

use kube::api::DynamicObject;
use pseudoflow_compiler::names::{bounded_name, stable_hash};
use serde_json::{json, Map, Value};

/// The API resource of a bound object as `spec.bound` keeps it (its `apiVersion` and `kind`,
/// and the kind's plural the bound flow discovered).
pub fn resource_of(object: &Value, plural: &str) -> kube::discovery::ApiResource {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    kube::discovery::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: object["kind"].as_str().unwrap_or_default().into(),
        plural: plural.into(),
    }
}

/// The finalizer flow `parent` (in `ns`) puts on each of its objects:
/// `ops.example.com/flow-<parent>`, bounded to a valid name (with a hash when shortened).
pub fn finalizer_name(ns: &str, parent: &str) -> String {
    let hash = stable_hash(&[ns, parent]);
    format!(
        "ops.example.com/{}",
        bounded_name(&format!("flow-{parent}"), hash, 63)
    )
}

/// `namespace/name` of an object (just `name` for a cluster-scoped one).
pub fn key(obj: &DynamicObject) -> String {
    let ns = obj.metadata.namespace.as_deref().unwrap_or_default();
    key_of(ns, obj.metadata.name.as_deref().unwrap_or_default())
}

/// [`key`] of the object `name` in namespace `ns` (empty for a cluster-scoped kind).
pub fn key_of(ns: &str, name: &str) -> String {
    if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    }
}

/// The object as what decides its runs sees it (triggers, served marks): apiVersion, kind,
/// metadata (name, namespace, uid, generation, labels, annotations) and every other top-level
/// field but `status`. Left out: what changes without the object changing (resourceVersion,
/// managedFields, finalizers, status), so a status write or our own finalizer never looks like
/// a change. Runs see it with its status: [`run_view`].
pub fn view(obj: &DynamicObject) -> Value {
    let m = &obj.metadata;
    let mut meta = Map::new();
    meta.insert("name".into(), json!(m.name));
    if let Some(ns) = &m.namespace {
        meta.insert("namespace".into(), json!(ns));
    }
    meta.insert("uid".into(), json!(m.uid));
    if let Some(g) = m.generation {
        meta.insert("generation".into(), json!(g));
    }
    meta.insert("labels".into(), json!(m.labels.clone().unwrap_or_default()));
    let annotations = m.annotations.clone().unwrap_or_default();
    let annotations: std::collections::BTreeMap<_, _> = annotations
        .into_iter()
        // kubectl's copy of the whole object would double the child's size; the bound flows'
        // marks naming their child (`claim`) are theirs, not the object's.
        .filter(|(k, _)| {
            k != "kubectl.kubernetes.io/last-applied-configuration"
                && !k.starts_with(pseudoflow_crd::bind::CHILD_MARK_PREFIX)
                && !k.starts_with(pseudoflow_crd::protocol::served::SERVED_PREFIX)
        })
        .collect();
    meta.insert("annotations".into(), json!(annotations));
    let mut out = Map::new();
    if let Some(t) = &obj.types {
        out.insert("apiVersion".into(), json!(t.api_version));
        out.insert("kind".into(), json!(t.kind));
    }
    out.insert("metadata".into(), Value::Object(meta));
    if let Some(data) = obj.data.as_object() {
        for (k, v) in data {
            if !matches!(k.as_str(), "status" | "metadata" | "apiVersion" | "kind") {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// The object as its runs see it (`${object}`): its [`view`] and its `status` as it was read
/// when the run was started, as a kopf handler gets `status` among its kwargs, so that a run
/// reads what earlier runs wrote back. Never what decides whether it runs: a status write
/// starts nothing ([`without_status`]).
pub fn run_view(view: &Value, obj: &DynamicObject) -> Value {
    let mut out = view.clone();
    if let (Some(status), Some(o)) = (obj.data.get("status"), out.as_object_mut()) {
        o.insert("status".into(), status.clone());
    }
    out
}

/// `v` (an object as a run saw it, [`run_view`]) without its `status`: what a trigger compares,
/// so that no status write (the runs' own write-back above all) starts a run.
pub fn without_status(v: &Value) -> std::borrow::Cow<'_, Value> {
    match v.as_object() {
        Some(o) if o.contains_key("status") => {
            let mut o = o.clone();
            o.remove("status");
            std::borrow::Cow::Owned(Value::Object(o))
        }
        _ => std::borrow::Cow::Borrowed(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Database",
            "metadata": {"name": "pg", "namespace": "ops", "uid": "u1", "generation": 2,
                "resourceVersion": "77", "finalizers": ["x"], "labels": {"a": "b"},
                "managedFields": [{"manager": "kubectl"}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "n": "1",
                    "child.ops.example.com/flow-x-1": "c1",
                    "served.ops.example.com/flow-x-1": "{}"}},
            "spec": {"version": "15"},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    #[test]
    fn the_view_keeps_what_the_object_says_and_drops_what_changes_without_it() {
        let v = view(&db());
        assert_eq!(
            v,
            json!({"apiVersion": "example.com/v1", "kind": "Database",
                "metadata": {"name": "pg", "namespace": "ops", "uid": "u1", "generation": 2,
                    "labels": {"a": "b"}, "annotations": {"n": "1"}},
                "spec": {"version": "15"}})
        );
        assert_eq!(key(&db()), "ops/pg");
    }

    #[test]
    fn runs_see_the_status_and_triggers_do_not() {
        let seen = run_view(&view(&db()), &db());
        assert_eq!(seen["status"], json!({"phase": "Running"}));
        assert_eq!(seen["spec"], json!({"version": "15"}));
        assert_eq!(*without_status(&seen), view(&db()));
        let plain = json!({"metadata": {"name": "c"}, "data": {"k": "v"}});
        assert!(matches!(
            without_status(&plain),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn finalizer_names_are_valid_and_differ_per_flow() {
        let f = finalizer_name("ops", "database");
        assert!(f.starts_with("ops.example.com/flow-database-"), "{f}");
        let long = finalizer_name("ops", &"x".repeat(200));
        assert!(long.split('/').nth(1).unwrap().len() <= 63, "{long}");
        assert_ne!(finalizer_name("a", "db"), finalizer_name("b", "db"));
    }
}
