//! The kopf examples (`examples/kopf/`, as shipped) moved into a namespace of their own: what
//! their e2e test (`controller/tests/examples/kopf.rs`) and the seed-kopf benchmarks
//! (`controller/benches/compare/seed_kopf.rs`, `seed002_kopf.rs`) apply. One reading of the
//! files, so that the test and the bench run the same objects.

use std::path::PathBuf;

use serde_json::{json, Value};

/// The path of `examples/kopf/<path>`.
pub fn example(path: &str) -> PathBuf {
    crate::seed::repo().join("examples/kopf").join(path)
}

/// Every document of `examples/kopf/<path>`, with each `(from, to)` text replaced first (other
/// namespaces the example names, such as the targets of seed 002's copy, made unique to the
/// caller), then moved into `ns`: each namespaced object the file puts in `default` (or
/// nowhere), and every RoleBinding subject.
pub fn documents_renamed(path: &str, ns: &str, renames: &[(&str, &str)]) -> Vec<Value> {
    let mut text = std::fs::read_to_string(example(path)).unwrap();
    for (from, to) in renames {
        text = text.replace(from, to);
    }
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut v: Value = serde::Deserialize::deserialize(doc).unwrap();
        let here = &v["metadata"]["namespace"];
        let cluster_scoped = matches!(
            v["kind"].as_str(),
            Some("ClusterRole" | "ClusterRoleBinding" | "PersistentVolume")
        );
        if !cluster_scoped && (here.is_null() || here == "default") {
            v["metadata"]["namespace"] = json!(ns);
        }
        let subjects = v.get_mut("subjects").and_then(Value::as_array_mut);
        for subject in subjects.into_iter().flatten() {
            subject["namespace"] = json!(ns);
        }
        docs.push(v);
    }
    docs
}
