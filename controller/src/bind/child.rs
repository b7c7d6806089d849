//! The child flow a bound flow keeps for one object: its deterministic name, its spec (the bound
//! flow's, without `bind`, with the object and what started the run in `bound`), and which
//! changes of the object start a run. Pure; the parent's reconcile does the writing.

use std::collections::{BTreeMap, BTreeSet};

use pseudoflow_compiler::names::label_value;
use pseudoflow_crd::bind::{Bind, BOUND_TO_LABEL};
use pseudoflow_crd::jsonpath::JsonPath;
use pseudoflow_crd::protocol::names::resistant_name;
use serde_json::{json, Value};

use super::object::without_status;

/// Annotation on a child: the parent's generation its spec was made from (a change of the
/// bound flow re-makes every child, as a spec change re-runs an ordinary flow).
pub const FLOW_GENERATION_ANNOTATION: &str = "ops.example.com/flow-generation";
pub use pseudoflow_crd::bind::OBJECT_ANNOTATION;
use pseudoflow_crd::rollout::REVISION_ANNOTATION;

/// The child flow's name: `<parent>-<object>` with 128 bits of SHA-256 over both (and the
/// object's namespace), at most 63 characters. Deterministic, so a restarted controller finds
/// it; collision-resistant, so no tenant can name an object to share another's child (the
/// 40 bits of FNV-1a used before were inverted in seconds).
pub fn child_name(parent: &str, obj_ns: &str, obj_name: &str) -> String {
    resistant_name(
        &format!("{parent}-{obj_name}"),
        &[parent, obj_ns, obj_name],
        63,
    )
}

/// What started a run for `now` (the object's view), given the view the child was last made
/// from: `{event: create}` for a new child, `{event: update, changed: [paths]}` for a change of
/// `metadata.generation` (or, for kinds without one, of any field) or of a `watchFields` path;
/// `None` when nothing that counts changed (a status write, a label, our finalizer). Both
/// views' `status` (a child's `spec.bound.object` holds the one its run read) is left aside.
pub fn trigger(previous: Option<&Value>, now: &Value, bind: &Bind) -> Option<Value> {
    let Some(prev) = previous else {
        return Some(json!({"event": "create", "changed": []}));
    };
    let (prev, now) = (without_status(prev), without_status(now));
    let (prev, now) = (prev.as_ref(), now.as_ref());
    let mut changed: BTreeSet<String> = BTreeSet::new();
    let generation = |v: &Value| v["metadata"]["generation"].as_i64();
    let content_counts = match (generation(prev), generation(now)) {
        (Some(a), Some(b)) => a != b,
        _ => true,
    };
    if content_counts {
        changed.extend(content_changes(prev, now));
    }
    for path in &bind.watch_fields {
        let Ok(p) = JsonPath::parse(path) else {
            continue;
        };
        if p.eval(prev) != p.eval(now) {
            changed.insert(path.clone());
        }
    }
    let generation_moved = generation(prev) != generation(now);
    if changed.is_empty() && !generation_moved {
        return None;
    }
    Some(json!({"event": "update", "changed": changed}))
}

/// jsonPaths of the fields (below the top level, one level deep) that differ, metadata aside.
fn content_changes(prev: &Value, now: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let empty = serde_json::Map::new();
    let (a, b) = (
        prev.as_object().unwrap_or(&empty),
        now.as_object().unwrap_or(&empty),
    );
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for k in keys {
        if matches!(k.as_str(), "metadata" | "apiVersion" | "kind") || a.get(k) == b.get(k) {
            continue;
        }
        match (
            a.get(k).and_then(Value::as_object),
            b.get(k).and_then(Value::as_object),
        ) {
            (Some(x), Some(y)) => {
                let inner: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for i in inner.into_iter().filter(|i| x.get(*i) != y.get(*i)) {
                    out.insert(format!(".{k}.{i}"));
                }
            }
            _ => {
                out.insert(format!(".{k}"));
            }
        }
    }
    out
}

/// Who the child is made for.
pub struct Parent<'a> {
    /// The bound flow's name and namespace (the child's namespace too).
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its uid (the child's owner).
    pub uid: &'a str,
    /// Its generation (recorded on the child).
    pub generation: i64,
    /// Its spec as written.
    pub spec: &'a Value,
}

impl<'a> Parent<'a> {
    /// The bound flow `r` reconciles, as its children and its objects' runs see it.
    pub(crate) fn of<Own>(r: &'a crate::flow::Reconciling<'a, Own>) -> Parent<'a> {
        Parent {
            name: r.flow_id.name,
            namespace: r.ns(),
            uid: r.uid,
            generation: r.generation,
            spec: &r.raw_spec,
        }
    }
}

/// The whole child flow for the object `view`, started by `trigger`: the parent's spec without
/// `bind`, plus `bound` (object, trigger, the kind's plural, what to write back, and the
/// versions of its related objects).
pub fn child_flow(
    p: &Parent,
    name: &str,
    plural: &str,
    view: &Value,
    trigger: &Value,
    related: &BTreeMap<String, String>,
) -> Value {
    let mut spec = p.spec.clone();
    let status = spec["bind"]["status"].take();
    if let Some(s) = spec.as_object_mut() {
        s.remove("bind");
        s.remove("bound");
        // Its revisions are the bound flow's (a flow without bind has none).
        s.remove("rollout");
        s.insert(
            "bound".into(),
            json!({"object": view, "trigger": trigger, "plural": plural, "status": status}),
        );
        if status.is_null() {
            s["bound"].as_object_mut().map(|b| b.remove("status"));
        }
        if !related.is_empty() {
            s["bound"]["related"] = json!(related);
        }
    }
    let object = match view["metadata"]["namespace"].as_str() {
        Some(ns) => format!(
            "{ns}/{}",
            view["metadata"]["name"].as_str().unwrap_or_default()
        ),
        None => view["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    };
    json!({
        "apiVersion": "ops.example.com/v1alpha1",
        "kind": "PseudoFlow",
        "metadata": {
            "name": name,
            "namespace": p.namespace,
            "labels": {BOUND_TO_LABEL: label_value(p.name)},
            "annotations": {
                FLOW_GENERATION_ANNOTATION: p.generation.to_string(),
                OBJECT_ANNOTATION: object,
                REVISION_ANNOTATION: super::revision::hash(p.spec),
            },
            "ownerReferences": [{
                "apiVersion": "ops.example.com/v1alpha1",
                "kind": "PseudoFlow",
                "name": p.name,
                "uid": p.uid,
                "controller": true,
            }],
        },
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(watch: &[&str]) -> Bind {
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Database",
            "watchFields": watch}))
        .unwrap()
    }

    fn obj(generation: i64, version: &str, password: &str) -> Value {
        json!({"metadata": {"name": "pg", "namespace": "ops", "generation": generation,
            "labels": {}, "annotations": {"pw": password}},
            "spec": {"version": version, "size": "1Gi"}})
    }

    #[test]
    fn a_new_object_is_a_create() {
        let t = trigger(None, &obj(1, "15", "a"), &bind(&[])).unwrap();
        assert_eq!(t, json!({"event": "create", "changed": []}));
    }

    #[test]
    fn a_generation_change_is_an_update_naming_what_changed() {
        let t = trigger(Some(&obj(1, "15", "a")), &obj(2, "16", "a"), &bind(&[])).unwrap();
        assert_eq!(t, json!({"event": "update", "changed": [".spec.version"]}));
    }

    #[test]
    fn an_unchanged_generation_is_no_run_unless_a_watched_field_changed() {
        let (a, b) = (obj(1, "15", "a"), obj(1, "15", "b"));
        assert_eq!(trigger(Some(&a), &b, &bind(&[])), None);
        assert_eq!(
            trigger(Some(&a), &a, &bind(&[".metadata.annotations.pw"])),
            None
        );
        let t = trigger(Some(&a), &b, &bind(&[".metadata.annotations.pw"])).unwrap();
        assert_eq!(
            t,
            json!({"event": "update", "changed": [".metadata.annotations.pw"]})
        );
    }

    #[test]
    fn a_status_change_is_no_run_even_for_kinds_without_generation_or_watching_it() {
        let mut a = obj(1, "15", "a");
        a["status"] = json!({"copiedTo": ["x"]});
        let mut b = a.clone();
        b["status"] = json!({"copiedTo": ["x", "y"]});
        let watching = bind(&[".status.copiedTo"]);
        assert_eq!(trigger(Some(&a), &b, &watching), None);
        let no_generation = |v: &Value| {
            let mut v = v.clone();
            v["metadata"].as_object_mut().unwrap().remove("generation");
            v
        };
        let (a, b) = (no_generation(&a), no_generation(&b));
        assert_eq!(trigger(Some(&a), &b, &bind(&[])), None);
        let mut c = b.clone();
        c["spec"]["size"] = json!("2Gi");
        let t = trigger(Some(&a), &c, &bind(&[])).unwrap();
        assert_eq!(t["changed"], json!([".spec.size"]));
    }

    #[test]
    fn kinds_without_generation_count_any_change_of_content() {
        let a = json!({"metadata": {"name": "s"}, "data": {"k": "1"}});
        let b = json!({"metadata": {"name": "s", "labels": {"x": "y"}}, "data": {"k": "2"}});
        let t = trigger(Some(&a), &b, &bind(&[])).unwrap();
        assert_eq!(t["changed"], json!([".data.k"]));
        assert_eq!(trigger(Some(&a), &a, &bind(&[])), None);
    }

    /// The name child flows had before: the low 40 bits of FNV-1a.
    fn old_child_name(parent: &str, obj_ns: &str, obj_name: &str) -> String {
        let hash = pseudoflow_compiler::names::stable_hash(&[parent, obj_ns, obj_name]);
        pseudoflow_compiler::names::bounded_name(&format!("{parent}-{obj_name}"), hash, 63)
    }

    #[test]
    fn objects_whose_old_child_names_collided_get_different_children() {
        // Found by a birthday search over namespaces (2^20 FNV-1a hashes, seconds).
        let (a, b) = ("team-2bd0cb", "team-650a38");
        assert_eq!(
            old_child_name("widgets", a, "payments-db"),
            old_child_name("widgets", b, "payments-db")
        );
        let (na, nb) = (
            child_name("widgets", a, "payments-db"),
            child_name("widgets", b, "payments-db"),
        );
        assert_ne!(na, nb);
        assert!(na.len() <= 63 && nb.len() <= 63);
        let suffix = na.rsplit('-').next().unwrap();
        assert_eq!(suffix.len() * 4, 128, "{na}");
    }

    #[test]
    fn the_child_is_the_parent_without_bind_owned_and_labelled() {
        let spec = json!({"serviceAccountName": "db", "steps": [{"type": "log", "message": "x"}],
            "bind": {"apiVersion": "example.com/v1", "kind": "Database",
                "status": {"phaseField": "phase"}}});
        let p = Parent {
            name: "database",
            namespace: "ops",
            uid: "u",
            generation: 3,
            spec: &spec,
        };
        let view = obj(1, "15", "a");
        let t = json!({"event": "create", "changed": []});
        let c = child_flow(
            &p,
            "database-pg-1",
            "databases",
            &view,
            &t,
            &BTreeMap::new(),
        );
        assert!(c["spec"].get("bind").is_none());
        assert!(c["spec"]["bound"].get("related").is_none());
        let versions: BTreeMap<String, String> = [("Secret/s".into(), "7".into())].into();
        let c = child_flow(&p, "database-pg-1", "databases", &view, &t, &versions);
        assert_eq!(c["spec"]["bound"]["related"], json!({"Secret/s": "7"}));
        assert_eq!(c["spec"]["bound"]["object"], view);
        assert_eq!(c["spec"]["bound"]["status"]["phaseField"], "phase");
        assert_eq!(c["spec"]["serviceAccountName"], "db");
        assert_eq!(c["metadata"]["labels"][BOUND_TO_LABEL], "database");
        assert_eq!(c["metadata"]["ownerReferences"][0]["uid"], "u");
        assert_eq!(c["metadata"]["annotations"][OBJECT_ANNOTATION], "ops/pg");
        let revision = &c["metadata"]["annotations"][REVISION_ANNOTATION];
        assert_eq!(revision, &json!(crate::bind::revision::hash(&spec)));
        let n = child_name("database", "ops", "pg");
        assert_eq!(n, child_name("database", "ops", "pg"));
        assert_ne!(n, child_name("database", "other", "pg"));
        assert!(n.starts_with("database-pg-") && n.len() <= 63);
    }
}
