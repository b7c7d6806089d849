//! `approval`: the run waits until a person allowed to `approve` pseudoflows approves the step
//! (`kubectl annotate pf FLOW ops.example.com/approve=STEP`) or rejects it
//! (`ops.example.com/reject=STEP`, the run fails). The controller does the waiting; who decided
//! is recorded in status from a stamp only the admission webhook can write (docs/decisions.md,
//! "Approvals"). `timeoutSeconds` bounds the wait.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, StepParams};

/// Waits for `ops.example.com/approve=<name>` (or `ops.example.com/reject=<name>`) on the flow,
/// set by a user with the `approve` verb on pseudoflows; the step's `name` is required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalStep {
    /// What the approver should check, shown in the status message and the waiting Event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl StepParams for ApprovalStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Controller
    }

    fn awaits_decision(&self) -> bool {
        true
    }
}
