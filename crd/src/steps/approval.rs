//! `approval`: the run waits until a person allowed to `approve` pseudoflows approves the step
//! (`kubectl annotate pf FLOW ops.example.com/approve=STEP`) or rejects it
//! (`ops.example.com/reject=STEP`, the run fails). The controller does the waiting; who decided
//! is recorded in status from a stamp only the admission webhook can write (docs/decisions.md,
//! "Approvals"). `timeoutSeconds` bounds the wait.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;

/// Waits until a user allowed to `approve` pseudoflows approves or rejects the step.
///
/// The step's `name` is required: `kubectl annotate pf FLOW ops.example.com/approve=NAME` (or
/// `kubectl pf approve FLOW NAME`) continues the run, `ops.example.com/reject=NAME` fails it.
/// The admission webhook refuses the annotation from a user without the `approve` verb on
/// pseudoflows and records who decided (user, groups, time) in a signed stamp the controller
/// checks; status shows it under the step's `approval`. Without the webhook no approval is
/// accepted (the step's message says why), nor without the API server authenticating to it
/// (chart `webhook.clientAuth`, [operations](operations.md#the-validating-webhook)): it stamps only
/// decisions the API server sent. While it waits, the flow's reason is
/// `WaitingForApproval` and its message `waiting for approval: NAME`; `timeoutSeconds` fails
/// the step when no decision came in time. A decision counts only for the step instances
/// waiting when it is made, in the run that waits: a later run, the next item or node of a loop
/// (inside a rolling `loopNodes` it gates each node) and a retried step each need their own
/// (`kubectl pf approve` sets the annotation again; by hand, remove it first if it still names
/// the step). A retry asks every approval again, and runs again what comes after one. Two
/// approval steps of one flow cannot share a name.
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

    fn plan_as() -> PlanAs {
        PlanAs::NoChange
    }

    fn awaits_decision(&self) -> bool {
        true
    }
}

/// Two `approval` steps of one flow (in `steps` or `onDelete`, at any depth) may not share a
/// name: the approve annotation names one step, and would decide both. The second is an error
/// naming the first's path.
pub fn check_unique_names(raw_spec: &Value, ctx: &mut Ctx) {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for field in ["steps", "onDelete"] {
        if let Some(list) = raw_spec.get(field).and_then(Value::as_array) {
            collect(list, field, &mut seen, ctx);
        }
    }
}

fn collect(list: &[Value], path: &str, seen: &mut BTreeMap<String, String>, ctx: &mut Ctx) {
    for (i, raw) in list.iter().enumerate() {
        let here = format!("{path}[{i}]");
        let ty = raw.get("type").and_then(Value::as_str).unwrap_or_default();
        let name = raw.get("name").and_then(Value::as_str);
        if let (true, Some(name)) = (ty == "approval", name) {
            match seen.get(name) {
                Some(first) => ctx.error(
                    &format!("{here}.name"),
                    format!(
                        "approval step name {name:?} is also the name of {}.{first}: an \
                         approval is decided by its name, so each approval step needs its own",
                        ctx.path()
                    ),
                ),
                None => {
                    seen.insert(name.to_string(), here.clone());
                }
            }
        }
        for (field, nested) in crate::step_schema::nested_lists(ty, raw) {
            collect(nested, &format!("{here}.{field}"), seen, ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn two_approvals_of_one_name_are_an_error_naming_both_paths() {
        let spec = json!({
            "steps": [
                {"type": "approval", "name": "gate"},
                {"type": "approval", "name": "other"},
                {"type": "loop", "forEach": [1], "steps": [{"type": "approval", "name": "gate"}]},
            ],
            "onDelete": [{"type": "approval", "name": "other"}],
        });
        let (_, diags) = crate::validate::validate_spec(&spec);
        let errors: Vec<String> = diags
            .errors()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect();
        assert_eq!(
            errors,
            [
                "spec.steps[2].steps[0].name: approval step name \"gate\" is also the name of \
                 spec.steps[0]: an approval is decided by its name, so each approval step needs \
                 its own",
                "spec.onDelete[0].name: approval step name \"other\" is also the name of \
                 spec.steps[1]: an approval is decided by its name, so each approval step needs \
                 its own",
            ],
            "{errors:?}"
        );
        // Another step type may share an approval's name.
        let ok = json!({"steps": [
            {"type": "approval", "name": "gate"},
            {"type": "log", "name": "gate", "message": "m"},
        ]});
        assert!(!crate::validate::validate_spec(&ok).1.has_errors());
    }

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
