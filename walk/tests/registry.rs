//! The controller runs every step type placed on its side: each example flow is compiled, and
//! every action node the controller does itself (no Job, no task; not a wait the walker keeps)
//! must have an arm in [`local::run`], the controller's one registration point (it has a `_`
//! arm, so this test is what stops a new controller-placed type from shipping without one).

use std::path::{Path, PathBuf};

use pseudoflow_compiler::lower::task_of;
use pseudoflow_compiler::source::load;
use pseudoflow_compiler::{compile, Engine, FlowId, NodeKind, PlanNode, Scope};
use pseudoflow_crd::steps::registry::STEP_TYPES;
use pseudoflow_crd::steps::Placement;
use pseudoflow_walk::local;

fn example(ty: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join(format!("examples/steps/{ty}.yaml"))
}

/// Whether the controller starts `node` as local work (what `reconcile/run/mod.rs` hands to
/// [`local::run`]), rather than the walker keeping it as a timer or a decision to wait for.
fn done_locally(node: &PlanNode) -> bool {
    let waits = node
        .step_kind()
        .is_some_and(|k| k.params().waits_seconds().is_some() || k.params().awaits_decision());
    node.kind == NodeKind::Action
        && node.placement == Placement::Controller
        && task_of(node).is_none()
        && !waits
}

#[test]
fn every_step_the_controller_does_itself_has_a_local_implementation() {
    let mut seen = Vec::new();
    for ty in STEP_TYPES {
        let text = std::fs::read_to_string(example(ty)).unwrap();
        let doc = load(&text).unwrap().remove(0);
        let id = FlowId {
            name: &doc.name,
            namespace: doc.namespace.as_deref(),
        };
        let compiled = compile(&id, doc.spec()).unwrap_or_else(|d| panic!("{ty}: {d}"));
        for node in compiled.plan.nodes().filter(|n| done_locally(n)) {
            let out = local::run(&Engine::new(), node, &Scope::default());
            assert!(
                !out.completion
                    .message
                    .contains("has no controller-side implementation"),
                "{ty}: {} ({}) is placed in the controller but it does not run it: {}",
                node.id,
                node.step_type,
                out.completion.message
            );
            seen.push(node.step_type.clone());
        }
    }
    // The check saw the controller's own types (else it would pass by checking nothing).
    for ty in ["log", "eval", "template"] {
        assert!(seen.iter().any(|s| s == ty), "{ty} not seen: {seen:?}");
    }
}
