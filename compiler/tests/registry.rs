//! Every registered step type is complete: it has an example flow that uses it, the reviewed
//! DAG and Job snapshots of that example, and a section in the step reference. A registry line
//! without them fails here instead of shipping an undocumented, untested type. (That the
//! executor handles every type lowered to a Job is checked in runtime-image/tests/registry.rs.)

mod common;

use common::*;
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_crd::steps::registry::STEP_TYPES;
use serde_json::Value;

/// Whether some step in `v` (at any depth) has `type: ty`.
fn uses_type(v: &Value, ty: &str) -> bool {
    match v {
        Value::Object(m) => {
            m.get("type").is_some_and(|t| t == ty) || m.values().any(|v| uses_type(v, ty))
        }
        Value::Array(items) => items.iter().any(|v| uses_type(v, ty)),
        _ => false,
    }
}

#[test]
fn every_step_type_has_an_example_snapshots_and_docs() {
    let docs = std::fs::read_to_string(repo().join("docs/steps.md")).unwrap();
    let mut missing = Vec::new();
    for ty in STEP_TYPES {
        let example = repo().join(format!("examples/steps/{ty}.yaml"));
        if !example.exists() {
            missing.push(format!("{ty}: no example {}", example.display()));
            continue;
        }
        let doc = load_one(&example);
        let id = FlowId {
            name: &doc.name,
            namespace: doc.namespace.as_deref(),
        };
        compile(&id, doc.spec()).unwrap_or_else(|d| panic!("{ty}: {d}"));
        if !uses_type(doc.spec(), ty) {
            missing.push(format!("{ty}: its example does not use it"));
        }
        for kind in ["dag", "jobs"] {
            let snap = repo().join(format!("snapshots/{kind}/steps-{ty}.snap"));
            if !snap.exists() {
                missing.push(format!("{ty}: no snapshot {}", snap.display()));
            }
        }
        if !docs.contains(&format!("\n## `{ty}`\n")) {
            missing.push(format!("{ty}: no section \"## `{ty}`\" in docs/steps.md"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
