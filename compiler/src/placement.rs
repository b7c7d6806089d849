//! Which API steps the controller runs itself instead of launching an executor Job: a
//! placement the compiler decides, so `pseudoflow-compile` shows it per step with its reason
//! (docs/decisions.md#api-steps-in-the-controller). The rule itself is `crd`'s
//! ([`ApiStepsIn`]), so `kubectl pf logs` explains a step without a pod by the same one.
//!
//! A Job costs a pod start (about 3 s on a real node) and a turn of kube-controller-manager's
//! rate-limited Job controller; a flow bound to a kind replaces a hand-written operator whose
//! reconcile answers in milliseconds. The controller runs a step only when its type says the
//! work is Kubernetes API calls that are safe to repeat
//! ([`StepParams::runs_in_controller`](pseudoflow_crd::steps::StepParams::runs_in_controller))
//! and the step did not ask for a pod of its own (`isolate`); it runs it with a client that
//! impersonates the flow's ServiceAccount, never with its own rights.

use petgraph::graph::DiGraph;
pub use pseudoflow_crd::api_steps::ApiStepsIn;

use crate::plan::{EdgeKind, NodeKind, PlanNode};

/// Marks every step of `g` the controller runs itself (`PlanNode::in_controller`), by the rule
/// `crd` holds for the compiler and `kubectl pf` alike ([`ApiStepsIn::runs`]).
pub(crate) fn mark_in_controller(g: &mut DiGraph<PlanNode, EdgeKind>, api_steps: ApiStepsIn) {
    for i in g.node_indices() {
        let n = &mut g[i];
        if n.kind != NodeKind::Action {
            continue;
        }
        if let Some(reason) = n.step.as_ref().and_then(|s| api_steps.runs(s, n.placement)) {
            n.in_controller = Some(reason.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::compile::{compile, FlowId};
    use serde_json::json;

    fn in_controller(spec: serde_json::Value) -> Vec<(String, Option<String>, Option<String>)> {
        let c = compile(&FlowId::default(), &spec).expect("compiles");
        c.plan
            .nodes()
            .filter(|n| n.step.is_some())
            .map(|n| (n.id.clone(), n.in_controller.clone(), n.segment.clone()))
            .collect()
    }

    fn cm(name: &str) -> serde_json::Value {
        json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}})
    }

    #[test]
    fn a_plain_flow_runs_its_api_steps_in_fused_jobs() {
        let nodes = in_controller(json!({"steps": [cm("a"), cm("b")]}));
        assert!(nodes.iter().all(|(_, c, _)| c.is_none()), "{nodes:?}");
        assert!(
            nodes.iter().all(|(_, _, s)| s.is_some()),
            "fused: {nodes:?}"
        );
    }

    #[test]
    fn the_option_runs_repeatable_api_steps_in_the_controller_and_nothing_else() {
        let nodes = in_controller(json!({"options": {"apiSteps": "Controller"}, "steps": [
            cm("a"),
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "a"}, "condition": "Exist"},
            {"type": "exec", "cmd": "true"},
            {"type": "applyFile", "path": "x.yaml"},
            cm("b"),
        ]}));
        let by_id = |id: &str| nodes.iter().find(|(i, ..)| i == id).cloned().unwrap();
        assert_eq!(
            by_id("s0").1.as_deref(),
            Some("options.apiSteps: Controller")
        );
        assert!(by_id("s1").1.is_some(), "waitFor: {nodes:?}");
        assert_eq!(by_id("s2").1, None, "exec runs a command: a pod");
        assert_eq!(by_id("s3").1, None, "applyFile reads files: a pod");
        assert!(
            nodes.iter().all(|(_, c, s)| !(c.is_some() && s.is_some())),
            "{nodes:?}"
        );
    }

    #[test]
    fn a_bound_flow_runs_them_in_the_controller_unless_told_or_isolated() {
        let bound = json!({"object": {}, "trigger": {}, "plural": "widgets"});
        let nodes = in_controller(json!({"bound": bound, "steps": [
            cm("a"),
            {"type": "apply", "isolate": true, "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}},
        ]}));
        assert_eq!(nodes[0].1.as_deref(), Some("bound flow"));
        assert_eq!(nodes[1].1, None, "isolate asks for a pod: {nodes:?}");
        let nodes = in_controller(
            json!({"bound": bound, "options": {"apiSteps": "Job"}, "steps": [cm("a")]}),
        );
        assert_eq!(nodes[0].1, None);
    }

    #[test]
    fn an_apply_to_the_status_subresource_runs_in_the_controller_too() {
        let bound = json!({"object": {}, "trigger": {}, "plural": "widgets"});
        let status = json!({"type": "apply", "subresource": "status", "manifests": {
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "status": {"copiedTo": []}}});
        let nodes = in_controller(json!({"bound": bound, "steps": [status.clone()]}));
        assert_eq!(nodes[0].1.as_deref(), Some("bound flow"), "{nodes:?}");
        let nodes =
            in_controller(json!({"options": {"apiSteps": "Controller"}, "steps": [status]}));
        assert_eq!(nodes[0].1.as_deref(), Some("options.apiSteps: Controller"));
    }
}
