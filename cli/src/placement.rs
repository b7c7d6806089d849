//! Which steps of a flow ran inside the controller, with no pod and so no log: the controller's
//! bookkeeping steps (`log`, `sleep`, `eval`, `approval`) and, for a flow bound to a kind or one
//! with `options.apiSteps: Controller`, its repeatable API steps (the rule the compiler marks
//! them by, `crd`'s `ApiStepsIn`). `kubectl pf logs` says so for such a step instead of printing
//! nothing, as if its pod had been lost.

use pseudoflow_crd::api_steps::ApiStepsIn;
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{PseudoFlowSpec, Step, StepStatus};
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
    let placement = step.kind.params().placement(in_node_context);
    if placement == Placement::Controller {
        return Some(InController {
            api: false,
            why: "the controller does this step's work itself",
        });
    }
    let spec: PseudoFlowSpec = serde_json::from_value(flow["spec"].clone()).ok()?;
    let why = ApiStepsIn::of(&spec).runs(&step, placement)?;
    Some(InController { api: true, why })
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
        let bound_to = json!({"object": {}, "trigger": {}, "plural": "widgets"});
        let bound = flow(json!({"bound": bound_to, "steps": [apply.clone()]}));
        assert_eq!(
            ran_in_controller(&bound, &status("spec.steps[0]")),
            Some(InController {
                api: true,
                why: "bound flow"
            })
        );
        let mut isolated = apply.clone();
        isolated["isolate"] = json!(true);
        let bound = flow(json!({"bound": bound_to, "steps": [isolated]}));
        assert_eq!(ran_in_controller(&bound, &status("spec.steps[0]")), None);
        let jobs =
            flow(json!({"bound": bound_to, "options": {"apiSteps": "Job"}, "steps": [apply]}));
        assert_eq!(ran_in_controller(&jobs, &status("spec.steps[0]")), None);
        assert_eq!(ran_in_controller(&jobs, &status("spec.steps[7]")), None);
    }
}
