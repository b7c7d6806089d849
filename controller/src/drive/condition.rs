//! An `if`/`when` condition evaluated in the controller, as the executor's pod would evaluate
//! it (one read of one object as the flow's ServiceAccount and its jsonPath test,
//! `pseudoflow_runtime`). A single GET: it takes no in-controller turn.

use pseudoflow_compiler::expr::{prepare_payload, Scope};
use pseudoflow_compiler::plan::PlanNode;
use pseudoflow_crd::protocol::{StepResult, Task};
use pseudoflow_walk::StoredRun;

use super::Driver;

/// How a condition evaluated in the controller came out.
#[derive(Debug)]
pub enum Evaluated {
    /// It read and tested (or failed to): the executor's result, its `condition` the answer.
    Read(Box<StepResult>),
    /// It could not be rendered from the run's variables: no retry mends that.
    Unrenderable(String),
    /// The read had not answered by the caller's deadline.
    TimedOut,
}

impl Driver<'_> {
    /// Evaluates instance `key` of condition `node` in `sc`, reading through `client`, cut at
    /// `until`.
    pub async fn condition(
        &self,
        run: &StoredRun,
        (node, key): (&PlanNode, &[String]),
        attempt: u32,
        sc: &Scope,
        (client, until): (&kube::Client, tokio::time::Instant),
    ) -> Evaluated {
        let quoting = self.spec.quoting();
        let step = match prepare_payload(self.engine, node, sc, quoting) {
            Ok((step, _)) => step,
            Err(e) => return Evaluated::Unrenderable(e.to_string()),
        };
        let mut input = self.input(run, (node, key), attempt, step);
        input.task = Task::Condition;
        let parsed: pseudoflow_crd::Step = match serde_json::from_value(input.step.clone()) {
            Ok(s) => s,
            Err(e) => return Evaluated::Unrenderable(format!("{}: step: {e}", node.path)),
        };
        let nowhere = std::path::PathBuf::from("/nonexistent");
        let ctx = pseudoflow_runtime::ExecCtx::new(input, nowhere, "false".into())
            .with_client(client.clone());
        let read = pseudoflow_runtime::execute(&ctx, &parsed);
        match tokio::time::timeout_at(until, read).await {
            Err(_) => Evaluated::TimedOut,
            Ok(Ok(r)) => Evaluated::Read(Box::new(r)),
            Ok(Err(e)) => Evaluated::Read(Box::new(StepResult::failed(e.to_string()))),
        }
    }
}
