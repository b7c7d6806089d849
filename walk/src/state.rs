//! The state of one run: one entry per node instance, serialisable so the controller can keep it
//! in the API (nothing that matters lives only in memory).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::split_instance_id;

/// An instance key: one element per enclosing loop (item index, or node name for node loops).
pub type Key = Vec<String>;

/// Phase of one node instance: the same phases `status.steps` reports.
pub use pseudoflow_crd::StepPhase as Phase;

/// What is known about one node instance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// Where the instance is in its life.
    pub phase: Phase,
    /// Whether its work changed anything.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changed: bool,
    /// What happened (bounded), for status.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// For conditions: the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<bool>,
    /// For loop starts: the item keys (indices or node names) and values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<(String, Value)>>,
    /// For retry starts: the current attempt (1-based); for others: the attempt they ran in.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempt: u32,
    /// Not to proceed before this time (unix seconds): sleeps and retry backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<i64>,
    /// A failure already dealt with (by an onError/continueOnError edge, a retry or a parent).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failure_handled: bool,
    /// When it started (unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// When it ended (unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    /// How long its work took, as the Job that ran it measured (milliseconds): exact where
    /// `finished_at - started_at` knows only whole seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<u64>,
    /// For an `approval` step: the MAC of the approval stamp on the flow when the controller
    /// first saw it waiting ("" if none); that stamp was made before this wait and never decides
    /// it. Compared as the controller recorded it, not by time: a stamp's time is the clock of
    /// whichever webhook replica made it, which need not agree with the controller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_stamp: Option<String>,
    /// For an `approval` step: who decided it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<pseudoflow_crd::status::ApprovalRecord>,
    /// For a fused step: the node whose Job runs it (its segment's head, normally).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_node: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Outcome of the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunPhase {
    /// Some instance still has work to do.
    #[default]
    Running,
    /// Every instance ended well (or its failure was handled).
    Succeeded,
    /// An unhandled failure, a timeout or an abort ended it.
    Failed,
}

/// Everything the walker knows about a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunState {
    /// Every instance the run has reached, by instance id.
    pub instances: BTreeMap<String, Instance>,
    /// Where the run as a whole is.
    #[serde(default)]
    pub phase: RunPhase,
    /// The node instance whose failure ended the run, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<(String, String)>,
}

/// Map key of a node instance: `s3-s0` or `s3-s0@worker-0` or `a@0/1`.
pub fn instance_id(node: &str, key: &[String]) -> String {
    if key.is_empty() {
        node.to_string()
    } else {
        format!("{node}@{}", key.join("/"))
    }
}

impl RunState {
    /// The instance's state (Pending when never touched).
    pub fn get(&self, node: &str, key: &[String]) -> Instance {
        self.instances
            .get(&instance_id(node, key))
            .cloned()
            .unwrap_or_default()
    }

    /// Mutable access, creating a Pending entry.
    pub fn entry(&mut self, node: &str, key: &[String]) -> &mut Instance {
        self.instances.entry(instance_id(node, key)).or_default()
    }

    /// Ends the run as Failed because of `id` (an instance id, or a run-level cause such as
    /// [`super::RUN_TIMEOUT`]); returns the instances that were running, now Aborted, whose
    /// work must be stopped. Needs no plan, so a run can be ended even when it cannot be
    /// compiled or stored any more.
    pub fn end_failed(&mut self, id: &str, message: &str) -> Vec<(String, Key)> {
        self.phase = RunPhase::Failed;
        self.failure = Some((id.to_string(), message.to_string()));
        let mut aborted = Vec::new();
        for (id, inst) in self.instances.iter_mut() {
            if inst.phase == Phase::Running {
                inst.phase = Phase::Aborted;
                aborted.push(split_instance_id(id));
            }
        }
        aborted
    }
}
