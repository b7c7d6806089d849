//! The executor handles every step type the compiler lowers to a Job: each example flow is
//! compiled, and every node that runs a step in a pod must have work in [`work`], the
//! executor's one registration point. `work` is exhaustive, so a new type has an arm there; this
//! test stops that arm from being the one saying the executor does not run it. A compound's
//! condition, node list or fetch is a task of its own, dispatched on `Task` in `execute`
//! (exhaustive).

use std::path::{Path, PathBuf};

use pseudoflow_compiler::lower::task_of;
use pseudoflow_compiler::source::load;
use pseudoflow_compiler::PlanNode;
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_crd::protocol::{ExecutorInput, FlowRef, Task};
use pseudoflow_crd::steps::registry::STEP_TYPES;
use pseudoflow_crd::steps::Placement;
use pseudoflow_runtime::steps::work;
use pseudoflow_runtime::{parse_input, ExecCtx};

fn example(ty: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join(format!("examples/steps/{ty}.yaml"))
}

/// A context for `node`'s step as the compiler would send it (nothing is run: [`work`] only
/// picks the work, which starts when awaited).
fn context(node: &PlanNode) -> (ExecCtx, pseudoflow_crd::Step) {
    let input = ExecutorInput {
        flow: FlowRef {
            name: "f".into(),
            namespace: "ops".into(),
            uid: "u".into(),
            service_account: "runner".into(),
        },
        run_id: "r1".into(),
        node_id: node.id.clone(),
        path: node.path.clone(),
        instance: vec![],
        attempt: 1,
        task: Task::Run,
        step: serde_json::to_value(node.step.as_ref().expect("a step")).unwrap(),
        target_node: (node.placement == Placement::Node).then(|| "w1".to_string()),
        timeout_seconds: None,
        artifacts: vec![],
        segment: vec![],
        changed_before: false,
        journal_key: None,
        result_key: None,
    };
    let (input, step) = parse_input(&serde_json::to_string(&input).unwrap()).unwrap();
    (
        ExecCtx::new(input, PathBuf::from("/nonexistent"), String::new()),
        step,
    )
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
        for node in compiled
            .plan
            .nodes()
            .filter(|n| task_of(n) == Some(Task::Run))
        {
            let (ctx, step) = context(node);
            assert!(
                work(&ctx, &step).is_some(),
                "{} ({}) runs in a Job but the executor does not handle it",
                node.id,
                node.step_type
            );
        }
    }
}
