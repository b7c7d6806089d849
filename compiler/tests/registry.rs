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

/// Each step of type `ty` in `steps` (at any depth), with whether it sits in a node context.
fn instances_of(
    steps: &[pseudoflow_crd::Step],
    ty: &str,
    in_nodes: bool,
    out: &mut Vec<(pseudoflow_crd::Step, bool)>,
) {
    for s in steps {
        if s.kind.type_name() == ty {
            out.push((s.clone(), in_nodes));
        }
        let nested_in_nodes = in_nodes || s.kind.type_name() == "loopNodes";
        for (_, children) in s.kind.params().children() {
            instances_of(children, ty, nested_in_nodes, out);
        }
    }
}

/// `kubectl pf plan` asks each type's `StepParams::plan_as` (a hook every type must define, or
/// it does not compile); this holds that answer to where the type's example steps run, so a
/// type cannot say "changes no object" of work on nodes, or preview work it does not do.
#[test]
fn every_step_type_plans_as_it_runs() {
    use pseudoflow_crd::steps::registry::plan_as;
    use pseudoflow_crd::steps::{Placement, PlanAs};
    let mut wrong = Vec::new();
    for ty in STEP_TYPES {
        let plan = plan_as(ty).expect("a registered type");
        let doc = load_one(&repo().join(format!("examples/steps/{ty}.yaml")));
        let spec: pseudoflow_crd::PseudoFlowSpec =
            serde_json::from_value(doc.spec().clone()).unwrap_or_else(|e| panic!("{ty}: {e}"));
        let mut found = Vec::new();
        instances_of(&spec.steps, ty, false, &mut found);
        assert!(!found.is_empty(), "{ty}: its example does not use it");
        let placements: Vec<Placement> = found
            .iter()
            .map(|(s, in_nodes)| s.kind.params().placement(*in_nodes))
            .collect();
        let always = |p: Placement| placements.iter().all(|x| *x == p);
        let nests = found
            .iter()
            .any(|(s, _)| !s.kind.params().children().is_empty());
        let on_nodes = matches!(plan, PlanAs::OnNodes | PlanAs::OnNodesInNodeContext(_));
        let previewed = matches!(plan, PlanAs::Preview(_));
        if nests != matches!(plan, PlanAs::Nested(_)) {
            wrong.push(format!(
                "{ty}: has nested steps: {nests}, but plans as {plan:?}"
            ));
        }
        if always(Placement::Node) && !on_nodes {
            wrong.push(format!("{ty}: always runs on nodes, but plans as {plan:?}"));
        }
        if always(Placement::Controller) && plan != PlanAs::NoChange {
            wrong.push(format!(
                "{ty}: the controller's own work changes no object, but plans as {plan:?}"
            ));
        }
        if previewed && !placements.contains(&Placement::Api) {
            wrong.push(format!(
                "{ty}: does no API work to preview by dry-run, but plans as {plan:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
