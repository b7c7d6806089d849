//! loopNodes' `drain:` and `gate:`, lowered into each node's body as ordinary step nodes:
//! `drain` (cordon + evict) → the loop's steps → `uncordon` → one `waitFor` per gate condition.
//! They are chained with `next` edges, so a failed drain skips the node's steps, a failed step
//! leaves the node cordoned, and a failed gate fails the node — which stops the rollout like
//! any failed node (later nodes do not start).

use petgraph::graph::NodeIndex;
use pseudoflow_crd::steps::drain::DrainStep;
use pseudoflow_crd::steps::loop_nodes::LoopNodesStep;
use pseudoflow_crd::steps::uncordon::UncordonStep;
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{Step, StepKind};

use super::{Builder, Scope};
use crate::plan::{EdgeKind, NodeKind};

/// The loop's node, as every generated step names it.
const NODE: &str = "${node}";

/// One generated step: where it is reported (`path`) and its node id.
struct Generated {
    step: Step,
    path: String,
    id: String,
}

fn generated(kind: StepKind, timeout_seconds: Option<u32>, path: String, id: String) -> Generated {
    Generated {
        step: Step {
            name: None,
            continue_on_error: false,
            timeout_seconds,
            isolate: false,
            kind,
        },
        path,
        id,
    }
}

/// The steps run before and after each node's own steps, in order.
fn around(p: &LoopNodesStep, path: &str, id: &str) -> (Vec<Generated>, Vec<Generated>) {
    let mut before = Vec::new();
    let mut after = Vec::new();
    if let Some(d) = &p.drain {
        let drain = DrainStep {
            node: NODE.into(),
            pods: d.pods.clone(),
        };
        before.push(generated(
            StepKind::Drain(drain),
            d.timeout_seconds,
            format!("{path}.drain"),
            format!("{id}-drain"),
        ));
        let uncordon = UncordonStep { node: NODE.into() };
        after.push(generated(
            StepKind::Uncordon(uncordon),
            None,
            format!("{path}.drain.uncordon"),
            format!("{id}-uncordon"),
        ));
    }
    if let Some(g) = &p.gate {
        for (i, c) in g.conditions.iter().enumerate() {
            after.push(generated(
                StepKind::WaitFor(c.clone()),
                g.timeout_seconds,
                format!("{path}.gate.conditions[{i}]"),
                format!("{id}-gate{i}"),
            ));
        }
    }
    (before, after)
}

impl Builder<'_> {
    /// A loopNodes with `drain:` or `gate:`: start → drain → steps → uncordon → gate → end.
    pub(super) fn maintained_loop(
        &mut self,
        step: &Step,
        scope: &Scope,
        kind: NodeKind,
        p: &LoopNodesStep,
    ) -> (NodeIndex, NodeIndex) {
        let id = scope.id_prefix.clone();
        let end_id = format!("{id}-end");
        let start = self.node(step, scope, kind, Placement::Api);
        let inner = self.inner(scope, &end_id, "steps", "", Some(id.as_str()), true);
        let (before, after) = around(p, &scope.path, &id);
        let mut exits = vec![(start, EdgeKind::Body)];
        for g in &before {
            let n = self.generated(g, &inner);
            self.connect(&exits, n);
            exits = vec![(n, EdgeKind::Next)];
        }
        let body = self.list(&p.steps, &inner);
        self.connect(&exits, body.entry);
        exits = body.exits;
        for g in &after {
            let n = self.generated(g, &inner);
            self.connect(&exits, n);
            exits = vec![(n, EdgeKind::Next)];
        }
        let end = self.compound_end(step, scope, true, None);
        self.connect(&exits, end);
        (start, end)
    }

    fn generated(&mut self, g: &Generated, inner: &Scope) -> NodeIndex {
        self.budget.step(|| g.path.clone());
        let scope = Scope {
            path: g.path.clone(),
            id_prefix: g.id.clone(),
            ..inner.clone()
        };
        self.node(&g.step, &scope, NodeKind::Action, Placement::Api)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::plan::EdgeKind;
    use crate::{compile, FlowId};

    fn flow(loop_nodes: Value) -> Result<crate::Compiled, pseudoflow_crd::Diagnostics> {
        let id = FlowId {
            name: "f",
            namespace: Some("ns"),
        };
        compile(&id, &json!({"steps": [loop_nodes]}))
    }

    fn rolling(extra: Value) -> Value {
        let mut v = json!({"type": "loopNodes", "selector": "",
            "steps": [{"type": "execNode", "cmd": "systemctl restart kubelet"}]});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    }

    #[test]
    fn each_node_is_drained_before_its_steps_uncordoned_after_and_gated_last() {
        let c = flow(rolling(json!({
            "drain": {"gracePeriodSeconds": 5, "timeoutSeconds": 120},
            "gate": {"timeoutSeconds": 30, "conditions": [
                {"resource": {"kind": "Node", "name": "${node}"}, "condition": "Ready"}]}
        })))
        .expect("valid");
        let next: Vec<(String, String)> = c
            .plan
            .edges()
            .filter(|(_, _, k)| matches!(k, EdgeKind::Next | EdgeKind::Body))
            .map(|(a, b, _)| (a.to_string(), b.to_string()))
            .collect();
        let chain = [
            "s0",
            "s0-drain",
            "s0-s0",
            "s0-uncordon",
            "s0-gate0",
            "s0-end",
        ];
        for w in chain.windows(2) {
            assert!(
                next.contains(&(w[0].to_string(), w[1].to_string())),
                "{} → {} missing: {next:?}",
                w[0],
                w[1]
            );
        }
        let drain = c.plan.node("s0-drain").unwrap();
        assert_eq!(drain.path, "spec.steps[0].drain");
        assert_eq!(drain.timeout_seconds, Some(120));
        assert_eq!(drain.loops, ["s0"], "one drain per node instance");
        let step = serde_json::to_value(drain.step.as_ref().unwrap()).unwrap();
        assert_eq!(step["node"], "${node}");
        assert_eq!(step["gracePeriodSeconds"], 5);
        let gate = c.plan.node("s0-gate0").unwrap();
        assert_eq!(gate.path, "spec.steps[0].gate.conditions[0]");
        assert_eq!(gate.timeout_seconds, Some(30));
        assert_eq!(gate.step_type, "waitFor");
    }

    #[test]
    fn a_gate_alone_adds_no_cordon() {
        let c = flow(rolling(json!({"gate": {"conditions": [
            {"resource": {"kind": "DaemonSet", "namespace": "kube-system", "name": "dns"}, "condition": "Available"}]}})))
        .expect("valid");
        let ids: Vec<&str> = c.plan.nodes().map(|n| n.id.as_str()).collect();
        assert!(ids.contains(&"s0-gate0"), "{ids:?}");
        assert!(
            !ids.iter()
                .any(|i| i.contains("drain") || i.contains("uncordon")),
            "{ids:?}"
        );
    }

    #[test]
    fn bad_drain_and_gate_options_are_reported_at_their_paths() {
        let d = flow(rolling(json!({
            "drain": {"skipSelector": "app in (", "gracePeriodSeconds": 99999},
            "gate": {"conditions": []}
        })))
        .expect_err("invalid");
        let text = d.to_string();
        for path in [
            "spec.steps[0].drain.skipSelector",
            "spec.steps[0].drain.gracePeriodSeconds",
            "spec.steps[0].gate.conditions",
        ] {
            assert!(text.contains(path), "{path} not in {text}");
        }
        let d = flow(rolling(json!({"gate": {"conditions": [
            {"resource": {"kind": "Node", "name": "${nod}"}, "condition": "Custom"}]}})))
        .expect_err("invalid");
        assert!(
            d.to_string()
                .contains("spec.steps[0].gate.conditions[0].jsonPath"),
            "{d}"
        );
        // `${node}` is known in a gate (the node just changed); a typo is told as unknown.
        let warned = |name: &str| {
            let c = flow(rolling(json!({"gate": {"conditions": [
                {"resource": {"kind": "Node", "name": name}, "condition": "Ready"}]}})))
            .expect("valid");
            c.warnings.to_string()
        };
        let typo = warned("${nod}");
        assert!(
            typo.contains("spec.steps[0].gate.conditions[0].resource.name")
                && typo.contains("not a flow variable"),
            "{typo}"
        );
        assert_eq!(warned("${node}"), "");
    }
}
