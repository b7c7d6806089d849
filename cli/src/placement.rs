//! Which steps of a flow ran inside the controller, with no pod and so no log: the controller's
//! bookkeeping steps (`log`, `sleep`, `eval`, `approval`) and, for a flow bound to a kind or one
//! with `options.apiSteps: Controller`, its repeatable API steps (the compiler's rule,
//! `compiler/src/placement.rs`). `kubectl pf logs` says so for such a step instead of printing
//! nothing, as if its pod had been lost.

use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{Step, StepStatus};
use serde_json::Value;

/// A step that ran in the controller.
#[derive(Debug, PartialEq, Eq)]
pub struct InController {
    /// An API step (one a user would look for a pod of), not a bookkeeping one.
    pub api: bool,
    /// Why it ran there.
    pub why: &'static str,
}

/// Whether (and why) step `s` of flow object `flow` (its JSON) ran in the controller.
pub fn ran_in_controller(flow: &Value, s: &StepStatus) -> Option<InController> {
    let (step, in_node_context) = step_at(flow, &s.path)?;
    let step: Step = serde_json::from_value(step.clone()).ok()?;
    let params = step.kind.params();
    match params.placement(in_node_context) {
        Placement::Controller => Some(InController {
            api: false,
            why: "the controller does this step's work itself",
        }),
        Placement::Api if !step.isolate && params.runs_in_controller() => {
            api_steps_in_controller(&flow["spec"]).map(|why| InController { api: true, why })
        }
        _ => None,
    }
}

/// Whether the flow's repeatable API steps run in the controller (`ApiStepsIn::of`).
fn api_steps_in_controller(spec: &Value) -> Option<&'static str> {
    match spec["options"]["apiSteps"].as_str().unwrap_or("Auto") {
        "Controller" => Some("options.apiSteps: Controller"),
        "Auto" if !spec["bind"].is_null() || !spec["bound"].is_null() => {
            Some("API steps of a bound flow run in the controller")
        }
        _ => None,
    }
}

/// The step at `path` (`spec.steps[1].steps[0]`) in `flow`, and whether it is inside a
/// `loopNodes` (where API steps run on the node).
fn step_at<'a>(flow: &'a Value, path: &str) -> Option<(&'a Value, bool)> {
    let mut at = flow;
    let mut in_nodes = false;
    for seg in path.split('.') {
        if at["type"] == "loopNodes" {
            in_nodes = true;
        }
        let (field, index) = match seg.split_once('[') {
            Some((f, rest)) => (f, Some(rest.strip_suffix(']')?.parse::<usize>().ok()?)),
            None => (seg, None),
        };
        at = at.get(field)?;
        if let Some(i) = index {
            at = at.get(i)?;
        }
    }
    Some((at, in_nodes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(path: &str) -> StepStatus {
        serde_json::from_value(
            json!({"id": "s0", "path": path, "type": "apply", "phase": "Succeeded"}),
        )
        .unwrap()
    }

    #[test]
    fn api_steps_of_a_bound_flow_and_bookkeeping_steps_ran_in_the_controller() {
        let apply = json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}});
        let flow = |spec: Value| json!({"spec": spec});
        let plain = flow(json!({"steps": [apply, {"type": "log", "message": "hi"}]}));
        assert_eq!(ran_in_controller(&plain, &status("spec.steps[0]")), None);
        let log = ran_in_controller(&plain, &status("spec.steps[1]")).unwrap();
        assert!(!log.api, "{log:?}");
        let bound = flow(json!({"bound": {}, "steps": [apply.clone()]}));
        assert_eq!(
            ran_in_controller(&bound, &status("spec.steps[0]")),
            Some(InController {
                api: true,
                why: "API steps of a bound flow run in the controller"
            })
        );
        let mut isolated = apply.clone();
        isolated["isolate"] = json!(true);
        let bound = flow(json!({"bound": {}, "steps": [isolated]}));
        assert_eq!(ran_in_controller(&bound, &status("spec.steps[0]")), None);
        let jobs = flow(json!({"bound": {}, "options": {"apiSteps": "Job"}, "steps": [apply]}));
        assert_eq!(ran_in_controller(&jobs, &status("spec.steps[0]")), None);
        assert_eq!(ran_in_controller(&jobs, &status("spec.steps[7]")), None);
    }
}
