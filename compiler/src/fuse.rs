//! Step fusion: a straight run of steps that share identity and placement becomes one
//! *segment*, executed by one Job (docs/decisions.md#step-fusion). The DAG keeps a node per
//! step — status, Events, metrics, `continueOnError` and the walker's rules stay per step — and
//! each member records the segment's first node (its *head*), whose Job runs them all in order.
//!
//! A segment never spans a branch point (if/when, loop, retry, parallel, onError, include): its
//! members are chained by plain sequence edges with no other way in or out. It never mixes
//! placements (API vs node) or loop instances (node A vs node B: members share the enclosing
//! loops, so one instance key — for a node loop, one node — names the Job). And a step that
//! reads a variable an earlier member sets starts a new segment: every member's `${...}` is
//! substituted by the controller before the Job starts, with the same engine and the same
//! single pass as an unfused step, so the executor carries no template engine.

use std::collections::BTreeSet;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::text::join;
use pseudoflow_crd::StepKind;
use serde_json::Value;

use crate::expr::Engine;
use pseudoflow_crd::protocol::{SegmentStep, StepResult};

use crate::plan::{EdgeKind, NodeKind, Plan, PlanNode};

/// Most steps one segment runs: a bound on one Job's input, result and run time.
pub const MAX_SEGMENT_STEPS: usize = 100;

/// Marks segments in `g`: every member of a run of two or more fusable steps gets
/// `segment = Some(head id)`.
pub(crate) fn mark_segments(g: &mut DiGraph<PlanNode, EdgeKind>) {
    let engine = Engine::new();
    let mut assigned = vec![false; g.node_count()];
    for head in g.node_indices() {
        // A segment starts with a step that needs a Job.
        if assigned[head.index()] || fusable(&g[head]) != Some(Fusable::Job) {
            continue;
        }
        let placement = g[head].placement;
        let mut chain = vec![head];
        let mut outputs: BTreeSet<String> = outputs_of(&g[head]);
        let mut cur = head;
        while chain.len() < MAX_SEGMENT_STEPS {
            let Some(next) = sole_successor(g, cur) else {
                break;
            };
            let (a, b) = (&g[cur], &g[next]);
            let joins = match fusable(b) {
                Some(Fusable::Job) => b.placement == placement,
                Some(Fusable::Local) => true,
                None => false,
            } && !assigned[next.index()]
                && b.loops == a.loops
                && b.parent == a.parent
                && b.on_node == a.on_node;
            if !joins || reads_any(&engine, b, &outputs) {
                break;
            }
            outputs.extend(outputs_of(b));
            chain.push(next);
            cur = next;
        }
        // Nor does it end with controller-local steps: they would only wait for the pod.
        while chain
            .last()
            .is_some_and(|n| fusable(&g[*n]) == Some(Fusable::Local))
        {
            chain.pop();
        }
        if chain.len() < 2 {
            continue;
        }
        let head_id = g[head].id.clone();
        for n in chain {
            assigned[n.index()] = true;
            g[n].segment = Some(head_id.clone());
        }
    }
}

/// How a step may take part in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fusable {
    /// Its work runs in an executor Job.
    Job,
    /// Cheap controller-local work (log, eval, sleep, template to a variable) that may sit
    /// between Job steps: the controller does it while preparing the segment (a sleep waits in
    /// the pod), and the Job reports it in its turn.
    Local,
}

/// Whether (and how) a step may share a Job: a leaf that did not ask for a Job of its own,
/// whose work runs in an executor Job under the flow's identity in the runtime image, or is
/// cheap controller-local work.
fn fusable(n: &PlanNode) -> Option<Fusable> {
    let step = n.step.as_ref()?;
    // An `approval` waits in the controller for a person: a Job must not run past it.
    // Nor does a step the controller runs itself (`crate::placement`): it needs no pod.
    if n.kind != NodeKind::Action
        || step.isolate
        || step.kind.params().awaits_decision()
        || n.in_controller.is_some()
    {
        return None;
    }
    match (&step.kind, n.placement) {
        // An `exec` that shapes its own pod — another image (`image`), or its container's
        // name (`container` without `pod`) — gets a pod of its own.
        (StepKind::Exec(e), _)
            if e.pod.is_none()
                && (e.image.as_deref().is_some_and(|i| !i.is_empty())
                    || e.container.as_deref().is_some_and(|c| !c.is_empty())) =>
        {
            None
        }
        (_, Placement::Api | Placement::Node) => Some(Fusable::Job),
        // A leaf the controller does itself (log, eval, sleep, template to a variable).
        (_, Placement::Controller) => Some(Fusable::Local),
        _ => None,
    }
}

/// The node `n` leads to when it is linked to it by sequence alone: one outgoing `next`/
/// `always` edge, and the target has no other incoming edge.
fn sole_successor(g: &DiGraph<PlanNode, EdgeKind>, n: NodeIndex) -> Option<NodeIndex> {
    let mut out = g.edges_directed(n, Direction::Outgoing);
    let e = out.next()?;
    if out.next().is_some() || !matches!(e.weight(), EdgeKind::Next | EdgeKind::Always) {
        return None;
    }
    let target = e.target();
    (g.edges_directed(target, Direction::Incoming).count() == 1).then_some(target)
}

fn outputs_of(n: &PlanNode) -> BTreeSet<String> {
    n.step_kind()
        .map(|k| {
            k.params()
                .outputs()
                .into_iter()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `n`'s parameters read one of `names` (or cannot be parsed: then it is not fused,
/// and fails as an unfused step would).
fn reads_any(engine: &Engine, n: &PlanNode, names: &BTreeSet<String>) -> bool {
    if names.is_empty() {
        return false;
    }
    let Some(kind) = n.step_kind() else {
        return false;
    };
    let params = kind.params();
    if params.input_var().is_some_and(|v| names.contains(v)) {
        return true;
    }
    if let StepKind::Eval(e) = kind {
        match engine.check_eval(&e.expression, &join(&n.path, "expression")) {
            Ok(r) if r.names.iter().all(|x| !names.contains(x)) => {}
            _ => return true,
        }
    }
    if let StepKind::Template(t) = kind {
        match engine.check_template(&t.template, &join(&n.path, "template")) {
            Ok(read) if read.iter().all(|r| !names.contains(r)) => {}
            _ => return true,
        }
    }
    let payload = crate::lower::payload(n);
    let skip = params.unsubstituted_fields();
    let mut strings = Vec::new();
    if let Value::Object(fields) = &payload {
        for (k, v) in fields {
            if !skip.contains(&k.as_str()) {
                collect_strings(v, &mut strings);
            }
        }
    }
    strings.into_iter().any(|s| match engine.check(s, &n.path) {
        Ok(refs) => refs
            .iter()
            .any(|r| r.names.iter().any(|x| names.contains(x))),
        Err(_) => true,
    })
}

fn collect_strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) if s.contains("${") => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}

/// The members of `node`'s segment from `node` to the segment's end, in order (empty when
/// `node` is not fused). A Job launched for `node` runs these; normally `node` is the head,
/// but when the head failed before its Job could start (an expression error) and the run goes
/// on (`continueOnError`), the next member launches a Job for the rest.
pub fn members_from<'p>(plan: &'p Plan, node: &PlanNode) -> Vec<&'p PlanNode> {
    let Some(head) = &node.segment else {
        return Vec::new();
    };
    plan.segment_members(head)
        .iter()
        .skip_while(|id| **id != node.id)
        .filter_map(|id| plan.node(id))
        .collect()
}

/// A member as the controller prepared it: its substituted step, or for controller-local work
/// (log, eval, template to a variable) what that work produced.
pub enum Prepared {
    /// The step to run in the Job.
    Step(Value),
    /// Done by the controller already; the Job reports it in its turn.
    Done(Box<StepResult>),
}

/// The executor's view of `members`, each prepared by `prepare` (the controller's substitution
/// or local work; an error is carried to the executor, which reports it when the step's turn
/// comes).
pub fn segment_steps(
    members: &[&PlanNode],
    mut prepare: impl FnMut(&PlanNode) -> Result<Prepared, String>,
) -> Vec<SegmentStep> {
    members
        .iter()
        .map(|m| {
            let (step, outcome, error) = match prepare(m) {
                Ok(Prepared::Step(v)) => (v, None, None),
                Ok(Prepared::Done(r)) => (Value::Null, Some(*r), None),
                Err(e) => (Value::Null, None, Some(e)),
            };
            SegmentStep {
                node_id: m.id.clone(),
                path: m.path.clone(),
                step,
                timeout_seconds: crate::lower::timeout_of(m),
                continue_on_error: m.continue_on_error,
                error,
                outcome,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::{compile, FlowId};

    /// `(node id, segment head)` of every Job or controller-local leaf, in plan order.
    fn segments(steps: Value) -> Vec<(String, Option<String>)> {
        let id = FlowId {
            name: "f",
            namespace: Some("ns"),
        };
        let c = compile(&id, &json!({"vars": {"v": "1"}, "steps": steps})).expect("valid");
        c.plan
            .nodes()
            .filter(|n| n.step.is_some() && n.kind == crate::plan::NodeKind::Action)
            .map(|n| (n.id.clone(), n.segment.clone()))
            .collect()
    }

    fn apply(name: &str) -> Value {
        json!({"type": "apply", "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}]})
    }

    fn seg(pairs: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        pairs
            .iter()
            .map(|(n, h)| (n.to_string(), h.map(str::to_string)))
            .collect()
    }

    #[test]
    fn consecutive_api_steps_share_a_segment_and_a_branch_point_splits_it() {
        let got = segments(json!([
            apply("a"),
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "a"}, "condition": "Exist"},
            {"type": "if", "condition": {"resource": {"kind": "ConfigMap", "name": "a"}, "jsonPath": "{.data.x}", "op": "equals", "value": "1"}, "then": [apply("b")]},
            apply("c"),
            apply("d"),
        ]));
        assert_eq!(
            got,
            seg(&[
                ("s0", Some("s0")),
                ("s1", Some("s0")),
                ("s2-then-s0", None),
                ("s3", Some("s3")),
                ("s4", Some("s3")),
            ])
        );
    }

    #[test]
    fn a_step_reading_an_output_of_the_segment_starts_a_new_one() {
        let got = segments(json!([
            {"type": "exec", "cmd": "echo x", "var": "out"},
            apply("a"),
            {"type": "apply", "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "${out}"}}]},
            apply("c"),
        ]));
        assert_eq!(
            got,
            seg(&[
                ("s0", Some("s0")),
                ("s1", Some("s0")),
                ("s2", Some("s2")),
                ("s3", Some("s2")),
            ])
        );
    }

    #[test]
    fn isolate_and_an_exec_shaping_its_own_pod_get_a_job_of_their_own() {
        let mut isolated = apply("b");
        isolated["isolate"] = json!(true);
        let got = segments(json!([
            apply("a"),
            isolated,
            apply("c"),
            {"type": "exec", "cmd": "kubectl version", "image": "bitnami/kubectl"},
            apply("d"),
            {"type": "exec", "cmd": "kubectl version", "container": "kubectl"},
            apply("e"),
        ]));
        assert!(got.iter().all(|(_, s)| s.is_none()), "{got:?}");
    }

    #[test]
    fn an_approval_splits_the_segment_around_it() {
        let got = segments(json!([
            apply("a"),
            {"type": "approval", "name": "gate"},
            apply("b"),
            apply("c"),
        ]));
        assert_eq!(
            got,
            seg(&[
                ("s0", None),
                ("s1", None),
                ("s2", Some("s2")),
                ("s3", Some("s2")),
            ])
        );
    }

    #[test]
    fn controller_local_steps_join_only_between_job_steps() {
        let got = segments(json!([
            {"type": "log", "message": "before"},
            apply("a"),
            {"type": "log", "message": "between ${v}"},
            {"type": "sleep", "seconds": 1},
            {"type": "eval", "expression": "1 + 1", "var": "two"},
            apply("b"),
            {"type": "log", "message": "after"},
        ]));
        assert_eq!(
            got,
            seg(&[
                ("s0", None),
                ("s1", Some("s1")),
                ("s2", Some("s1")),
                ("s3", Some("s1")),
                ("s4", Some("s1")),
                ("s5", Some("s1")),
                ("s6", None),
            ])
        );
        // An eval whose value a later step reads splits there.
        let got = segments(json!([
            apply("a"),
            {"type": "eval", "expression": "1 + 1", "var": "two"},
            {"type": "apply", "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"n": "${two}"}}]},
        ]));
        assert_eq!(got, seg(&[("s0", None), ("s1", None), ("s2", None)]));
    }

    #[test]
    fn node_steps_fuse_per_node_loop_body_and_never_with_api_steps() {
        let got = segments(json!([
            apply("a"),
            {"type": "loopNodes", "selector": "", "steps": [
                {"type": "configFile", "path": "/etc/x", "content": "x"},
                {"type": "patchFile", "path": "/etc/y", "pattern": "a", "replace": "b"},
                {"type": "execNode", "cmd": "systemctl restart kubelet", "onlyIfChanged": true},
            ]},
        ]));
        assert_eq!(
            got,
            seg(&[
                ("s0", None),
                ("s1-s0", Some("s1-s0")),
                ("s1-s1", Some("s1-s0")),
                ("s1-s2", Some("s1-s0")),
            ])
        );
    }

    #[test]
    fn a_step_with_an_on_error_handler_ends_its_segment() {
        let got = segments(json!([
            apply("a"),
            apply("b"),
            {"type": "onError", "steps": [apply("h")]},
            apply("c"),
        ]));
        assert_eq!(got[0], ("s0".to_string(), Some("s0".to_string())));
        assert_eq!(got[1], ("s1".to_string(), Some("s0".to_string())));
        assert!(got[2..].iter().all(|(_, s)| s.is_none()), "{got:?}");
    }
}
