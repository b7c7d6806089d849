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
    /// For a fused segment (step fusion): the steps this Job runs, in order, the first being
    /// the one `node_id`/`path`/`step` describe. Empty for a Job of one step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segment: Vec<SegmentStep>,
    /// For a segment: whether an earlier step of the run changed this instance's node, which
    /// an `onlyIfChanged` member needs (members also count the changes of the members before
    /// them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changed_before: bool,
    /// For a segment: the key its journal entries are signed with
    /// ([`super::journal`]; this document is a Secret, the journal a ConfigMap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_key: Option<String>,
    /// The key the executor seals its result with ([`super::sealed`]): the result carries
    /// variables, which may hold values read from Secrets, and goes where `view` reaches (the
    /// termination message). None (a run started by an older controller): sent unsealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_key: Option<String>,
}

/// One step of a fused segment, prepared by the controller exactly as it would prepare the
/// step for a Job of its own: `${...}` already substituted (a member never reads what an
/// earlier member of its segment sets, so nothing is left to substitute in the pod).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SegmentStep {
    /// The step's DAG node: its result is reported under this id.
    pub node_id: String,
    /// The step's path in the spec, for messages.
    pub path: String,
    /// The step, substituted (Null when `error` is set).
    pub step: Value,
    /// The step's own timeout (or its type's default), enforced per step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// A failure of this step does not stop the segment (`continueOnError`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continue_on_error: bool,
    /// Why the controller could not prepare the step (an expression failed): reported as the
    /// step's failure when its turn comes, as an unfused step would fail when it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For controller-local work between Job steps (log, eval, template to a variable): what
    /// the controller's doing it produced; the executor reports it when the step's turn comes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<crate::protocol::StepResult>,
}

/// The field of a step's payload (`ExecutorInput::step`) holding the run's variables, for a
/// step that reads a YAML body at run time ([`crate::steps::StepParams::reads_body`]): the
/// executor substitutes `${...}` inside the body's values with them.
pub const BODY_VARS: &str = "bodyVars";
