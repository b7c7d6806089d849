//! An API step the controller runs itself: its request built once for both kinds of run, and
//! started; each caller awaits its end its own way (a flow's reconcile a moment, then folds it
//! at a later one; a bound object's run until its deadline).

use pseudoflow_compiler::expr::{prepare_payload, Scope};
use pseudoflow_compiler::lower::{in_controller_input, NodeInstance};
use pseudoflow_compiler::plan::PlanNode;
use pseudoflow_crd::protocol::ExecutorInput;
use pseudoflow_walk::StoredRun;
use serde_json::Value;

use super::Driver;
use crate::in_controller::{InControllerSteps, Request, Started};

impl Driver<'_> {
    /// The executor input of one instance of `node` run in the controller (no node, no pod),
    /// `step` its rendered payload.
    pub fn input(
        &self,
        run: &StoredRun,
        (node, key): (&PlanNode, &[String]),
        attempt: u32,
        step: Value,
    ) -> ExecutorInput {
        in_controller_input(&NodeInstance {
            flow: self.flow,
            run_id: &run.run_id,
            node,
            instance: key,
            attempt,
            step,
            target_node: None,
            artifacts: &[],
            segment: Vec::new(),
            changed_before: false,
            run_secret: None,
        })
    }

    /// The request for the instance's API step, rendered in `sc`, acting through the client
    /// `client` gives (asked only once the step rendered), or why it cannot run (neither is
    /// mended by a retry).
    pub fn request(
        &self,
        run: &StoredRun,
        (node, key): (&PlanNode, &[String]),
        attempt: u32,
        sc: &Scope,
        client: impl FnOnce() -> Result<kube::Client, String>,
    ) -> Result<Request, String> {
        let quoting = self.spec.quoting();
        let (step, _) =
            prepare_payload(self.engine, node, sc, quoting).map_err(|e| e.to_string())?;
        let client = client()?;
        Ok(Request {
            key: self.step_key(run, &node.id, key, attempt),
            flow: (self.flow.namespace.clone(), self.flow.name.clone()),
            flow_uid: self.flow.uid.clone(),
            client,
            input: self.input(run, (node, key), attempt, step),
            once: false,
        })
    }

    /// Starts `req` in the controller (under the flow's turns); returns its key and what tells
    /// when it held its turn and when it ended, for the caller to await.
    pub fn submit(&self, steps: &InControllerSteps, req: Request) -> (String, Started) {
        let work = req.key.clone();
        (work, steps.start(req))
    }
}
