//! One run as it is kept in the API between reconciles: the walker's state plus what the run
//! started with (its spec, id, trigger) and what it gathered (step outputs, fetched includes).

use std::collections::BTreeMap;

use pseudoflow_compiler::runtime::includes::Included;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::RunState;

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
    /// Set once the end of the run was counted in metrics and Events.
    #[serde(default)]
    pub reported: bool,
    /// Random, kept only here (a Secret): the root of the keys its segment Jobs sign their
    /// journals with (`crd::protocol::journal`). Set before the run's first Job.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret: String,
}
