//! The executor handles every step type the compiler lowers to a Job: each example flow is
//! compiled, and every node that needs a pod must have a type [`has_executor`] accepts. With
//! the exhaustive dispatch in `steps::run`, a new registry line cannot ship without one.

use std::path::{Path, PathBuf};

use pseudoflow_compiler::lower::task_of;
use pseudoflow_compiler::source::load;
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_crd::steps::registry::STEP_TYPES;
use pseudoflow_runtime::steps::has_executor;

fn example(ty: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join(format!("examples/steps/{ty}.yaml"))
}

#[test]
fn every_node_lowered_to_a_job_has_an_executor() {
    for ty in STEP_TYPES {
        let text = std::fs::read_to_string(example(ty)).unwrap();
        let doc = load(&text).unwrap().remove(0);
        let id = FlowId {
            name: &doc.name,
            namespace: doc.namespace.as_deref(),
        };
        let compiled = compile(&id, doc.spec()).unwrap_or_else(|d| panic!("{ty}: {d}"));
        for node in compiled.plan.nodes().filter(|n| task_of(n).is_some()) {
            let kind = node
                .step_kind()
                .unwrap_or_else(|| panic!("{}: no step", node.id));
            assert!(
                has_executor(kind),
                "{} ({}) runs in a Job but the executor does not handle it",
                node.id,
                node.step_type
            );
        }
    }
}
