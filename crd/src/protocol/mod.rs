//! The contract between the controller and `pseudoflow-step`, the executor: the input document
//! it receives ([`ExecutorInput`]), the result it reports ([`StepResult`]), the labels,
//! annotations and environment both rely on, and the helpers both must compute identically
//! (label values, digests, include classification); and the served mark's key, which the
//! controller writes and `kubectl pf get` reads. It lives here, not in the compiler, so the
//! executor depends on the resource types only — no DAG, no template engine.

pub mod included;
pub mod input;
pub mod journal;
pub mod names;
pub mod result;
pub mod sealed;
pub mod served;

pub use included::{classify, Classified, ClassifyError};
pub use input::{ExecutorInput, FlowRef, SegmentStep, Task, BODY_VARS};
pub use names::{content_digest, journal_key, label_value};
pub use result::{IncludedDocument, MemberResult, StepResult, TERMINATION_MESSAGE_LIMIT};

/// Label every object the operator creates carries (`app.kubernetes.io/managed-by`).
pub const MANAGED_BY: &str = "pseudoflow";
/// Label key of [`MANAGED_BY`]: how the controller finds (and only finds) its own Jobs.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Label key naming the program an object belongs to (`pseudoflow-step` on executor Jobs).
pub const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
/// Label: the flow a Job belongs to.
pub const LABEL_FLOW: &str = "ops.example.com/flow";
/// Label: the run a Job belongs to.
pub const LABEL_RUN: &str = "ops.example.com/run";
/// Label: the DAG node a Job executes.
pub const LABEL_NODE: &str = "ops.example.com/node";
/// Annotation on an executor Job (and its input Secret): the DAG node it runs (`kubectl pf`
/// finds a step's Jobs, and its logs, by it).
pub const NODE_ID_ANNOTATION: &str = "ops.example.com/node-id";
/// Annotation on an executor Job: the step's path in the flow (`spec.steps[2].then[0]`).
pub const STEP_PATH_ANNOTATION: &str = "ops.example.com/step-path";
/// Annotation on an executor Job: the loop instance it runs (item keys joined by `/`).
pub const INSTANCE_ANNOTATION: &str = "ops.example.com/instance";
/// Annotation on an executor Job: which attempt of its step it is (retries count up).
pub const ATTEMPT_ANNOTATION: &str = "ops.example.com/attempt";
/// Field manager of the executor's server-side applies (and of `kubectl pf plan`'s dry-runs of
/// them, so a plan shows what the executor's apply would).
pub const FIELD_MANAGER: &str = "pseudoflow";
/// Where the executor finds its input inside the pod.
pub const INPUT_DIR: &str = "/etc/pseudoflow/input";
/// Key of the input document in the input Secret.
pub const INPUT_KEY: &str = "input.json";
/// Annotation on an executor Job (and its input Secret): SHA-256 of the input document.
pub const INPUT_DIGEST_ANNOTATION: &str = "ops.example.com/input-sha256";
/// Environment variable of the executor: SHA-256 the input file must have.
pub const INPUT_DIGEST_ENV: &str = "PSEUDOFLOW_INPUT_SHA256";
/// Environment variable of the executor: its Job's name, which names (and owns) the result
/// ConfigMap of a large result.
pub const JOB_NAME_ENV: &str = "PSEUDOFLOW_JOB_NAME";
/// Where the executor binary is copied for a step that runs in another image (`exec.image`).
pub const EXECUTOR_DIR: &str = "/pseudoflow/bin";
/// Type of input Secrets, so they are recognisable among a namespace's Secrets.
pub const INPUT_SECRET_TYPE: &str = "ops.example.com/step-input";
