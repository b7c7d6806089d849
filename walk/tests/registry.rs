//! The controller runs exactly the step types placed on its side. [`local::run`], the
//! controller's one registration point, has an arm for each type it does itself and a `_` for
//! the rest (so a type run in a Job never touches it, issue #45 item 1); whether a type is the
//! controller's is decided once, by `StepParams::placement` in `crd`. These tests hold the arms
//! to that decision over every step type's example flow: every action node the controller does
//! itself (no Job, no task; not a wait the walker keeps) must have an arm, and every type
//! `local.rs` names must be one the controller does itself.

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

/// Every node of every step type's example flow that the controller does itself.
fn local_nodes() -> Vec<PlanNode> {
    let mut out = Vec::new();
    for ty in STEP_TYPES {
        let text = std::fs::read_to_string(example(ty)).unwrap();
        let doc = load(&text).unwrap().remove(0);
        let id = FlowId {
            name: &doc.name,
            namespace: doc.namespace.as_deref(),
        };
        let compiled = compile(&id, doc.spec()).unwrap_or_else(|d| panic!("{ty}: {d}"));
        out.extend(compiled.plan.nodes().filter(|n| done_locally(n)).cloned());
    }
    out
}

#[test]
fn every_step_the_controller_does_itself_has_a_local_implementation() {
    let nodes = local_nodes();
    for node in &nodes {
        let out = local::run(&Engine::new(), node, &Scope::default());
        assert!(
            !out.completion
                .message
                .contains("has no controller-side implementation"),
            "{} ({}) is placed in the controller but it does not run it: {}",
            node.id,
            node.step_type,
            out.completion.message
        );
    }
    // The check saw the controller's own types (else it would pass by checking nothing).
    for ty in ["log", "eval", "template"] {
        assert!(
            nodes.iter().any(|n| n.step_type == ty),
            "{ty} not seen: {nodes:?}"
        );
    }
}

/// The `type:` names of the step types `local.rs` names (`StepKind::Eval` is `eval`).
fn types_named_in_local_rs() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/local.rs");
    let text = std::fs::read_to_string(path).unwrap();
    let mut names: Vec<String> = text
        .split("StepKind::")
        .skip(1)
        .map(|rest| {
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            let mut chars = rest[..end].chars();
            let first = chars.next().unwrap().to_ascii_lowercase();
            std::iter::once(first).chain(chars).collect()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The other half of the rule: `local.rs` names only the types the controller does itself, so
/// a type run in a Job (or only shaping the DAG, or a wait the walker keeps) is decided by its
/// placement alone and adds no line here.
#[test]
fn local_run_names_only_the_types_the_controller_does_itself() {
    let local: Vec<String> = local_nodes().into_iter().map(|n| n.step_type).collect();
    let named = types_named_in_local_rs();
    assert!(
        named.iter().any(|t| t == "log"),
        "the scan of local.rs found {named:?}"
    );
    for ty in &named {
        assert!(
            STEP_TYPES.contains(&ty.as_str()),
            "local.rs names {ty}, which is no step type"
        );
        assert!(
            local.contains(ty),
            "local.rs names {ty}, but no {ty} node in the examples is one the controller does \
             itself (placement Controller, no Job, not a wait): its placement decides where it \
             runs, so it needs no arm in local::run"
        );
    }
}
