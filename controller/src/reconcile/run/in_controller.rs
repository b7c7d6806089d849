//! Driving the API steps the controller runs itself (`crate::in_controller`): started where a
//! Job would be launched, folded like a Job's result, started again after a restart. Their
//! request is the run driver's ([`crate::drive`]), as for a bound object's run.

use std::time::Duration;

use pseudoflow_compiler::plan::PlanNode;

use super::Driving;
use crate::drive::failed;
use crate::flow::Error;
use crate::in_controller::{Request, Seen};
use crate::limits::STEP_IN_CONTROLLER_WAIT_MS;
use pseudoflow_walk::StoredRun;

impl Driving<'_> {
    /// The key the controller knows the instance's work by.
    pub(super) fn in_controller_key(
        &self,
        run: &StoredRun,
        node: &str,
        key: &[String],
        attempt: u32,
    ) -> String {
        self.driver().step_key(run, node, key, attempt)
    }

    /// Runs the instance in the controller: folds its result if a reconcile before started it
    /// and it ended, else starts it (again, after a restart) and waits a moment for it. Returns
    /// whether it settled the instance.
    pub(super) async fn run_in_controller(
        &self,
        run: &mut StoredRun,
        node: &PlanNode,
        key: &[String],
        attempt: u32,
    ) -> Result<bool, Error> {
        let steps = &self.r.own.in_controller;
        let work = self.in_controller_key(run, &node.id, key, attempt);
        match steps.take(&work) {
            Seen::Done(result, times) => {
                self.fold(run, &node.id, key, *result, Some(times)).await;
                return Ok(true);
            }
            Seen::Running => return Ok(false),
            Seen::Unknown => {}
        }
        let req = match self.in_controller_request(run, node, key, attempt) {
            Ok(req) => req,
            Err(why) => {
                self.complete(run, &node.id, key, failed(why)).await;
                return Ok(true);
            }
        };
        let sa = &self.flow_ref.service_account;
        let how = format!(" (in the controller, as ServiceAccount {sa})");
        self.tell_started(node, key, &how).await;
        let ended = self.driver().submit(steps, req).1.ended;
        let wait = Duration::from_millis(STEP_IN_CONTROLLER_WAIT_MS);
        // The receiver is let go before the last look: a step ending after it wakes the flow.
        let _ = tokio::time::timeout(wait, ended).await;
        match steps.take(&work) {
            Seen::Done(result, times) => {
                self.fold(run, &node.id, key, *result, Some(times)).await;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The request for the instance's work (built by the run driver, [`crate::drive`]), or why
    /// it cannot run.
    fn in_controller_request(
        &self,
        run: &StoredRun,
        node: &PlanNode,
        key: &[String],
        attempt: u32,
    ) -> Result<Request, String> {
        let driver = self.driver();
        let sc = driver.scope(run, node, key);
        let (ns, sa) = (&self.flow_ref.namespace, &self.flow_ref.service_account);
        let client = || {
            self.r.ctx.accounts.client_as(ns, sa).map_err(|why| {
                format!("cannot run this step in the controller as ServiceAccount {ns}/{sa}: {why}")
            })
        };
        driver.request(run, (node, key), attempt, &sc, client)
    }
}
