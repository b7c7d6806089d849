//! One run as it is kept in the API between reconciles: the walker's state plus what the run
//! started with (its spec, id, trigger) and what it gathered (step outputs, fetched includes).

use std::collections::BTreeMap;

use crate::includes::Included;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use pseudoflow_crd::status::MAX_PREVIOUS_RUNS;
use pseudoflow_crd::FlowPhase;

use super::{RunPhase, RunState};

/// Why a run still running was stopped for a new one (`status.previousRuns[].reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// `concurrencyPolicy: Replace`: a newer run took over.
    Replaced,
    /// The flow is being deleted: its `onDelete` steps take over.
    Deleted,
}

/// How one earlier run ended, kept with the run after it so status can tell it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndedRun {
    /// Its id.
    pub run_id: String,
    /// Succeeded, Failed, or Aborted.
    pub phase: FlowPhase,
    /// Succeeded, StepFailed, Timeout, RunStateTooLarge, Replaced or Deleted.
    pub reason: String,
    /// When it started (unix seconds).
    pub started_at: i64,
    /// When it ended or was stopped (unix seconds).
    #[serde(default)]
    pub finished_at: Option<i64>,
}

/// Everything about the current run that is not in the plan.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredRun {
    /// The run's id (see [`super::select::wanted_id`]); prefixes its Job names.
    pub run_id: String,
    /// The flow's generation that started it.
    pub generation: i64,
    /// The `ops.example.com/run` annotation that started it.
    #[serde(default)]
    pub trigger: Option<String>,
    /// The raw spec the run started with: a run is driven with it to its end, whatever edits
    /// come meanwhile (absent in runs stored by older controllers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<Value>,
    /// When it started (unix seconds).
    pub started_at: i64,
    /// When it ended (unix seconds).
    #[serde(default)]
    pub finished_at: Option<i64>,
    /// Step outputs (`var`, `varPerNode`, `eval`, `template`), flow-wide.
    #[serde(default)]
    pub vars: BTreeMap<String, Value>,
    /// The walker's state: one entry per node instance.
    pub state: RunState,
    /// Steps `include`/`includeFlow` fetched this run, by the fetching node's id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub includes: BTreeMap<String, Included>,
    /// `concurrencyPolicy: Allow`: earlier runs still running beside this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub beside: Vec<StoredRun>,
    /// The run this one retries, if it is a retry (status `run.retryOf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// Where this retry restarted: the step named by `ops.example.com/retry-from`, or the path
    /// of the step that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_from: Option<String>,
    /// The `ops.example.com/retry` value this run has dealt with (it was there when the run
    /// started, started it, or was refused while it ran): only a new value retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_token: Option<String>,
    /// The `ops.example.com/run` value on the flow when this run started (a retry keeps its
    /// run's): on a scheduled flow only another value starts a run now (`kubectl pf run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_token: Option<String>,
    /// How the runs before this one ended, newest first (`status.previousRuns`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous: Vec<EndedRun>,
    /// Set once the end of the run was counted in metrics and Events.
    #[serde(default)]
    pub reported: bool,
    /// Random, kept only here (a Secret): the root of the keys its segment Jobs sign their
    /// journals with (`crd::protocol::journal`). Set before the run's first Job.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret: String,
}

/// The pseudo node id under which a run ended for its state size is recorded.
pub const RUN_STATE_TOO_LARGE: &str = "run-state";

impl StoredRun {
    /// The flow phase and reason this run stands for: a failed run says why (a step, the
    /// run's timeout, a run state too large to store).
    pub fn outcome(&self) -> (FlowPhase, &'static str) {
        let cause = self.state.failure.as_ref().map(|(id, _)| id.as_str());
        match self.state.phase {
            RunPhase::Running => (FlowPhase::Running, "Running"),
            RunPhase::Succeeded => (FlowPhase::Succeeded, "Succeeded"),
            RunPhase::Failed if cause == Some(super::RUN_TIMEOUT) => (FlowPhase::Failed, "Timeout"),
            RunPhase::Failed if cause == Some(super::RUN_STOPPED) => {
                (FlowPhase::Aborted, "Aborted")
            }
            RunPhase::Failed if cause == Some(RUN_STATE_TOO_LARGE) => {
                (FlowPhase::Failed, "RunStateTooLarge")
            }
            RunPhase::Failed => (FlowPhase::Failed, "StepFailed"),
        }
    }

    /// What a run started at `now` after this one keeps as its history: this run and those
    /// beside it (each Aborted for `cause` if still running, else as it ended), then this
    /// run's own history, newest first and at most [`MAX_PREVIOUS_RUNS`].
    pub fn history_after(&self, cause: StopCause, now: i64) -> Vec<EndedRun> {
        let mut ended: Vec<EndedRun> = std::iter::once(self)
            .chain(&self.beside)
            .map(|run| run.ended(cause, now))
            .collect();
        ended.sort_by_key(|e| std::cmp::Reverse(e.started_at));
        self.with_previous(ended)
    }

    /// `newest`, then this run's history, at most [`MAX_PREVIOUS_RUNS`] in all.
    pub fn with_previous(&self, mut newest: Vec<EndedRun>) -> Vec<EndedRun> {
        newest.extend(self.previous.iter().cloned());
        newest.truncate(MAX_PREVIOUS_RUNS);
        newest
    }

    /// This run as a run that ended by `now`: as it ended, or Aborted for `cause`.
    pub fn ended(&self, cause: StopCause, now: i64) -> EndedRun {
        let (phase, reason) = match self.outcome() {
            (FlowPhase::Running, _) => (
                FlowPhase::Aborted,
                match cause {
                    StopCause::Replaced => "Replaced",
                    StopCause::Deleted => "Deleted",
                },
            ),
            ended => ended,
        };
        EndedRun {
            run_id: self.run_id.clone(),
            phase,
            reason: reason.to_string(),
            started_at: self.started_at,
            finished_at: self.finished_at.or(Some(now)),
        }
    }
}
