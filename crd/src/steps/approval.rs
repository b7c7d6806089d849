//! `approval`: the run waits until a person allowed to `approve` pseudoflows approves the step
//! (`kubectl annotate pf FLOW ops.example.com/approve=STEP`) or rejects it
//! (`ops.example.com/reject=STEP`, the run fails). The controller does the waiting; who decided
//! is recorded in status from a stamp only the admission webhook can write (docs/decisions.md,
//! "Approvals"). `timeoutSeconds` bounds the wait.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, StepParams};

/// Waits until a user allowed to `approve` pseudoflows approves or rejects the step.
///
/// The step's `name` is required: `kubectl annotate pf FLOW ops.example.com/approve=NAME` (or
/// `kubectl pf approve FLOW NAME`) continues the run, `ops.example.com/reject=NAME` fails it.
/// The admission webhook refuses the annotation from a user without the `approve` verb on
/// pseudoflows and records who decided (user, groups, time) in a signed stamp the controller
/// checks; status shows it under the step's `approval`. Without the webhook no approval is
/// accepted (the step's message says why). While it waits, the flow's reason is
/// `WaitingForApproval` and its message `waiting for approval: NAME`; `timeoutSeconds` fails
/// the step when no decision came in time. A decision counts only for the step instances
/// waiting when it is made, in the run that waits: a later run, the next item or node of a loop
/// (inside a rolling `loopNodes` it gates each node) and a retried step each need their own
/// (`kubectl pf approve` sets the annotation again; by hand, remove it first if it still names
/// the step).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalStep {
    /// What the approver should check, shown in the Event published when the step begins
    /// waiting.
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn an_approval_needs_a_name_also_nested() {
        let spec = json!({"steps": [
            {"type": "approval", "name": "gate", "timeoutSeconds": 60},
            {"type": "approval"},
            {"type": "loop", "forEach": [1], "steps": [{"type": "approval", "message": "m"}]},
        ]});
        let (_, diags) = crate::validate::validate_spec(&spec);
        let errors: Vec<String> = diags
            .errors()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect();
        assert_eq!(
            errors,
            [
                "spec.steps[1]: missing required field \"name\"",
                "spec.steps[2].steps[0]: missing required field \"name\"",
            ],
            "{errors:?}"
        );
    }
}
