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
use pseudoflow_crd::validate::join;
use pseudoflow_crd::StepKind;
use serde_json::Value;

use crate::expr::Engine;
use pseudoflow_crd::protocol::SegmentStep;

use crate::plan::{EdgeKind, NodeKind, Plan, PlanNode};

/// Most steps one segment runs: a bound on one Job's input, result and run time.
pub const MAX_SEGMENT_STEPS: usize = 100;

/// Marks segments in `g`: every member of a run of two or more fusable steps gets
/// `segment = Some(head id)`.
pub(crate) fn mark_segments(g: &mut DiGraph<PlanNode, EdgeKind>) {
    let engine = Engine::new();
    let mut assigned = vec![false; g.node_count()];
    for head in g.node_indices() {
        if assigned[head.index()] || !fusable(&g[head]) {
            continue;
        }
        let mut chain = vec![head];
        let mut outputs: BTreeSet<String> = outputs_of(&g[head]);
        let mut cur = head;
        while chain.len() < MAX_SEGMENT_STEPS {
            let Some(next) = sole_successor(g, cur) else {
                break;
            };
            let (a, b) = (&g[cur], &g[next]);
            let joins = fusable(b)
                && !assigned[next.index()]
                && b.placement == a.placement
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

/// A step that may share a Job: a leaf whose work runs in an executor Job under the flow's
/// identity, in the runtime image, and that did not ask for a Job of its own.
fn fusable(n: &PlanNode) -> bool {
    let Some(step) = &n.step else { return false };
    n.kind == NodeKind::Action
        && matches!(n.placement, Placement::Api | Placement::Node)
        && !step.isolate
        // `exec.image` runs in another image: a pod of its own.
        && !matches!(&step.kind, StepKind::Exec(e) if e.pod.is_none() && e.image.as_deref().is_some_and(|i| !i.is_empty()))
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

/// The executor's view of `members`, each prepared by `prepare` (the controller's
/// substitution; an error is carried to the executor, which reports it when the step's turn
/// comes).
pub fn segment_steps(
    members: &[&PlanNode],
    mut prepare: impl FnMut(&PlanNode) -> Result<Value, String>,
) -> Vec<SegmentStep> {
    members
        .iter()
        .map(|m| {
            let (step, error) = match prepare(m) {
                Ok(v) => (v, None),
                Err(e) => (Value::Null, Some(e)),
            };
            SegmentStep {
                node_id: m.id.clone(),
                path: m.path.clone(),
                step,
                timeout_seconds: crate::lower::timeout_of(m),
                continue_on_error: m.continue_on_error,
                error,
            }
        })
        .collect()
}
