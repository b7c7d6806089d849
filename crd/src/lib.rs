//! The PseudoFlow custom resource: what users write (`spec`), what the controller reports
//! (`status`), and the checks that make a bad flow fail with a path before anything runs.
//!
//! Every step type lives in its own module under [`steps`], owning its parameters, its schema and
//! its semantic validation; [`steps::registry`] is the one list that ties them together.
#![warn(missing_docs)]

pub mod api_steps;
pub mod bind;
pub mod check;
pub mod common;
pub mod depth;
pub mod diagnostics;
pub mod docs;
pub mod enum_schema;
pub mod executor;
pub mod jsonpath;
pub mod limits;
pub mod protocol;
pub mod quoting;
pub mod resource;
pub mod rollout;
pub mod schedule;
pub mod schema;
pub mod selector;
pub mod spec;
pub mod status;
pub mod step;
pub mod step_schema;
pub mod steps;
pub mod text;
pub mod validate;

pub use diagnostics::{Diagnostic, Diagnostics, Severity};
pub use resource::PseudoFlow;
pub use spec::{
    ApiSteps, ArtifactSource, ConcurrencyPolicy, EventPolicy, FlowOptions, PseudoFlowSpec,
};
pub use status::{FlowPhase, PseudoFlowStatus, StepPhase, StepStatus};
pub use step::{Step, StepKind};

/// API group of the resource; also the prefix of the labels and annotations the operator owns.
pub const GROUP: &str = "ops.example.com";
/// Served version of the resource.
pub const VERSION: &str = "v1alpha1";
/// Annotation whose change of value starts a new run (manual re-run).
pub const RUN_ANNOTATION: &str = "ops.example.com/run";
/// Annotation naming a run (its id, `status.run.id`) to end now: its running Jobs deleted, no
/// further step started, the run `Aborted` (`kubectl pf stop`).
pub const STOP_ANNOTATION: &str = "ops.example.com/stop";
/// Annotation whose change of value retries the last run: a new run that keeps the steps that
/// succeeded (their outputs restored) and restarts at the failed step (`kubectl pf retry`).
pub const RETRY_ANNOTATION: &str = "ops.example.com/retry";
/// With [`RETRY_ANNOTATION`]: the step (name or path) the retry restarts at, instead of the
/// failed one; it and every step after it run again.
pub const RETRY_FROM_ANNOTATION: &str = "ops.example.com/retry-from";
/// Annotation approving the waiting `approval` step it names (`kubectl pf approve`); only a
/// user with the `approve` verb may set it, and the controller acts on it only with the
/// mutating webhook's stamp.
pub const APPROVE_ANNOTATION: &str = "ops.example.com/approve";
/// Annotation rejecting the waiting `approval` step it names (the run fails), under the same
/// rules as [`APPROVE_ANNOTATION`].
pub const REJECT_ANNOTATION: &str = "ops.example.com/reject";
