//! `status` of a PseudoFlow: what a person (`kubectl get pf`), `kubectl wait` and Argo CD read.
//! Bounded in size: large loops are summarised with counts instead of one entry per item.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most entries `status.steps` holds; beyond it entries are summarised in `stepsOmitted`.
pub const MAX_STEP_ENTRIES: usize = 200;

/// Phase of the flow's current run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum FlowPhase {
    /// Not started yet (or waiting to be started).
    Pending,
    /// A run is in progress.
    Running,
    /// The last run ended well.
    Succeeded,
    /// The last run failed (see reason and message).
    Failed,
    /// The last run was stopped before its end.
    Aborted,
}

/// Phase of one DAG node (also what the controller's walker tracks per node instance).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum StepPhase {
    #[default]
    /// Not reached yet.
    Pending,
    /// Its work is under way.
    Running,
    /// It ended well.
    Succeeded,
    /// It failed.
    Failed,
    /// A condition or an earlier failure left it out.
    Skipped,
    /// Stopped before its end.
    Aborted,
}

impl StepPhase {
    /// Finished one way or another.
    pub fn settled(self) -> bool {
        !matches!(self, StepPhase::Pending | StepPhase::Running)
    }
}

/// Observed state of a flow.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PseudoFlowStatus {
    /// The `metadata.generation` this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Start of the latest run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_time: Option<Time>,
    /// Phase of the current run; Failed also when the spec is invalid and nothing ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<FlowPhase>,
    /// Machine-readable cause of the phase (InvalidSpec, Timeout, StepFailed, Aborted, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Progress (`done/total steps done; running <step>`) or what failed, with the step's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Ready (True only when Succeeded), Progressing (while Running), Degraded (on Failed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The current (or latest) run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunStatus>,
    /// A run waiting for the current one to end (concurrencyPolicy Forbid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_run: Option<RunStatus>,
    /// `done/total` DAG nodes of the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Name or path of the step running now (or the one that failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step: Option<String>,
    /// One entry per step the current run has reached, in plan order (at most 200).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepStatus>,
    /// Entries left out of `steps` to keep the object small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_omitted: Option<u32>,
    /// The latest `spec.schedule` slot a run was started for (or skipped under Forbid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// The next `spec.schedule` slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// The runs before the current one, newest first (at most [`MAX_PREVIOUS_RUNS`]): how each
    /// ended, so a run replaced by a newer one (`concurrencyPolicy: Replace`, a deletion)
    /// still shows as Aborted after its successor took `phase` and `run`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_runs: Vec<PreviousRun>,
    /// A flow bound to a kind (`spec.bind`): its objects, counted by phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<BoundSummary>,
    /// The number of the run state the controller last stored (its sealed Secret): a stored
    /// state with a lower number is an older one put back, and is refused (`RunStateTampered`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_state_sequence: Option<u64>,
    /// What compiling the flow warned about (e.g. `| raw` on tenant data), at most
    /// [`MAX_WARNINGS_SHOWN`], each `path: message`: shown where GitOps tools and
    /// `kubectl describe` look, not only at admission.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Most compile warnings `status.warnings` lists.
pub const MAX_WARNINGS_SHOWN: usize = 10;

/// What a flow bound to a kind serves: counts, and the latest failures (bounded in size
/// whatever the number of objects).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoundSummary {
    /// Objects of the kind that match.
    pub objects: u32,
    /// Objects whose run is pending or running.
    pub creating: u32,
    /// Objects whose latest run succeeded.
    pub running: u32,
    /// Objects whose latest run failed, or whose flow could not be made.
    pub failed: u32,
    /// The latest failures (at most 5), newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5))]
    pub failures: Vec<BoundFailure>,
    /// Where each object's run is recorded: `spec.bind.record`, or, unset, what the compiler
    /// chose (`Object` when every step runs in the controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<crate::bind::BindRecord>,
    /// The revision of the flow's steps as they are now, which serves its objects from now on:
    /// its ControllerRevision's name (docs/bound-flows.md#revisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    /// The objects per revision that last served them, newest revision first (at most
    /// [`MAX_REVISIONS_SHOWN`]; an object served before revisions were kept is in none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_REVISIONS_SHOWN))]
    pub revisions: Vec<RevisionCount>,
    /// The rollout of the newest revision to the objects (docs/bound-flows.md#rollouts); None
    /// when no revision is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
}

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutPhase {
    /// Waves are under way.
    #[default]
    Progressing,
    /// Paused by hand (`kubectl pf rollout pause`): Argo CD's Suspended.
    Paused,
    /// Stopped because `maxFailures` objects of the revision failed: Argo CD's Degraded.
    Stopped,
    /// Every object is served by the revision.
    Completed,
}

/// The rollout of one revision to a bound flow's objects, as `kubectl pf rollout status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The revision being rolled out (its ControllerRevision's name): the current one, or after
    /// an `undo` the previous one.
    pub revision: String,
    /// The revision objects not yet reached keep (None: none served before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Where it stands.
    pub phase: RolloutPhase,
    /// The wave under way (1-based), of `waves`.
    pub wave: u32,
    /// Waves in all (the implied last one counted).
    pub waves: u32,
    /// Objects the waves reached so far are to have on `revision`.
    pub target: u32,
    /// Objects `revision` served without failure.
    pub updated: u32,
    /// Objects of `revision` whose latest run failed (`namespace/name`, at most 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5))]
    pub failed_objects: Vec<String>,
    /// Why it stands where it does, for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The revision an `undo` took back (the flow's spec still names it until it changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone: Option<String>,
    /// The last action a person asked for and the controller accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<RolloutActionRecord>,
}

/// An accepted `kubectl pf rollout` action, as the webhook's stamp recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutActionRecord {
    /// What was asked.
    pub action: crate::rollout::RolloutAction,
    /// The user the API server authenticated.
    pub user: String,
    /// When the webhook admitted it.
    pub time: Time,
}

/// Most revisions `status.bound.revisions` lists.
pub const MAX_REVISIONS_SHOWN: usize = 20;

/// How many objects one revision of a bound flow last served.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionCount {
    /// Its number (the ControllerRevision's `revision`: higher is newer).
    pub revision: i64,
    /// The ControllerRevision's name (`<flow>-<hash>`).
    pub name: String,
    /// Objects it last served.
    pub objects: u32,
}

/// One object whose run failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoundFailure {
    /// `namespace/name` of the object.
    pub object: String,
    /// What failed.
    pub message: String,
}

/// Most runs `status.previousRuns` keeps.
pub const MAX_PREVIOUS_RUNS: usize = 5;

/// How an earlier run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviousRun {
    /// The run's id (its Jobs' `ops.example.com/run` label).
    pub id: String,
    /// Succeeded, Failed, or Aborted (stopped before its end).
    pub phase: FlowPhase,
    /// Why it ended so: Succeeded, StepFailed, Timeout, Replaced (a newer run took over under
    /// `concurrencyPolicy: Replace`), Deleted (the flow was deleted while it ran).
    pub reason: String,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it ended (or was stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

/// Identity of one run: what started it and when.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// Deterministic id derived from generation and run annotation; prefixes its Job names.
    pub id: String,
    /// The flow's `metadata.generation` the run was started for.
    pub generation: i64,
    /// Value of the `ops.example.com/run` annotation that started it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// When the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the run ended; absent while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// The run this one retries (`ops.example.com/retry`): the steps that succeeded there were
    /// kept, not run again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// The step this retry restarted at (`ops.example.com/retry-from`, or the failed step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_from: Option<String>,
}

/// One DAG node (or a summary of a loop's instances of it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepStatus {
    /// Stable node id from the compiler.
    pub id: String,
    /// Path of the step in the spec, e.g. `spec.steps[3].then[0]`.
    pub path: String,
    /// The step's `type`.
    #[serde(rename = "type")]
    pub step_type: String,
    /// The step's `name`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The step's phase; for a step with several instances, a summary (Running while any runs).
    pub phase: StepPhase,
    /// When the step started; only for a step with one instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the step finished; only for a step with one instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// What the step last reported, e.g. why it failed; only for a step with one instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether the step changed anything (false on a no-op re-run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<bool>,
    /// Attempt of the enclosing `retry`, shown from the second attempt on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// For node steps: the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// For steps inside loops: counts per phase over all instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<InstanceCounts>,
    /// For an `approval` step: who approved or rejected it, as the admission webhook
    /// authenticated them; only for a step with one instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
    /// For `include` and `includeFlow`: `sha256:` of the steps it ran (their JSON with keys
    /// sorted and no spaces), what a `digest:` pins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Who decided an `approval` step, from the stamp only the admission webhook can write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// `Approved` or `Rejected`.
    pub decision: String,
    /// The user the API server authenticated.
    pub user: String,
    /// Their groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// When the decision was admitted.
    pub time: Time,
}

/// Phase counts over a node's loop instances.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceCounts {
    /// Instances of the step in this run (one per loop item or node).
    pub total: u32,
    /// Instances that succeeded.
    pub succeeded: u32,
    /// Instances that failed.
    pub failed: u32,
    /// Instances running now.
    pub running: u32,
    /// Instances that were skipped.
    pub skipped: u32,
}
