//! What the controller hands one executor pod: the input document (`input.json` in the step's
//! input Secret). Both sides deserialise the same types, so a field added here is seen by both.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ArtifactSource;

/// The flow a node belongs to: whose Jobs they are, and the identity its pods run with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowRef {
    /// The flow's name, for labels, names and owner references.
    pub name: String,
    /// Where every object of the run lives.
    pub namespace: String,
    /// The flow object's uid: owner references must name this object, not a namesake.
    pub uid: String,
    /// The identity every executor pod of this flow runs with.
    pub service_account: String,
}

/// What the executor is asked to do with the step it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Task {
    /// Perform the step (apply, waitFor, configFile, ...).
    Run,
    /// Evaluate the `if`/`when` condition and report true/false.
    Condition,
    /// List the nodes a selector matches (loopNodes, node fan-out).
    ListNodes,
    /// Fetch an `include` source and report its content.
    FetchInclude,
}

/// Everything the executor needs, written to the input Secret as `input.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorInput {
    /// The flow the step belongs to.
    pub flow: FlowRef,
    /// The run this execution is part of (labels the result ConfigMap).
    pub run_id: String,
    /// The DAG node executed.
    pub node_id: String,
    /// The step's path in the spec, for messages the user can find.
    pub path: String,
    /// One key per enclosing loop (item index, or node name for node loops).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance: Vec<String>,
    /// Which attempt of a `retry` body this is (1-based).
    pub attempt: u32,
    /// What to do with the step.
    pub task: Task,
    /// The step with every `${...}` already substituted.
    pub step: Value,
    /// The node to act on, for node steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_node: Option<String>,
    /// The step's timeout, enforced by the executor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// Where artifact files come from (`spec.artifacts`), for applyFile/deleteFile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ArtifactSource>,
}
