//! A retry of an ended run (`ops.example.com/retry`, `kubectl pf retry`): a new run that keeps
//! what succeeded in the old one — its instances, outputs and fetched includes — and lets the
//! walker run again only the rest. Pure: the reconcile decides when, and saves the result.

use std::collections::BTreeSet;

use pseudoflow_compiler::plan::{NodeKind, Plan, PlanNode};

use super::{split_instance_id, Phase, RunPhase, StopCause, StoredRun};

/// Why a run cannot be retried now; the message is what the user is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Retrying beside a running run would race it for the same objects.
    #[error("run {0} is still running: a retry starts only once it has ended")]
    Running(String),
    /// Nothing failed, and no step to restart at was named.
    #[error("run {0} succeeded: nothing to retry (name a step with ops.example.com/retry-from to run it again)")]
    NothingFailed(String),
    /// The named step is not in the run's plan.
    #[error("no step {0:?} in run {1}: name a step by its name or its path (spec.steps[2])")]
    UnknownStep(String, String),
}

/// What a retry is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The new run's id.
    pub id: &'a str,
    /// The `ops.example.com/retry` value that asked for it.
    pub token: &'a str,
    /// The step to restart at (name or path); None: the steps that failed.
    pub from: Option<&'a str>,
    /// Now (unix seconds): when the new run starts.
    pub now: i64,
}

/// The run that retries `ended` (driven with `plan`, its plan with its includes): the same
/// spec, generation and trigger, every instance that succeeded or was skipped kept (without the
/// Job that ran it, so a fused segment's next member launches a Job of its own), the rest left
/// for the walker to run again. With `from`, that step and every step after it run again. An
/// `approval` step is never kept: it asks again, and every step after it runs again.
pub fn retry_run(plan: &Plan, ended: &StoredRun, request: Request) -> Result<StoredRun, Refused> {
    if ended.state.phase == RunPhase::Running {
        return Err(Refused::Running(ended.run_id.clone()));
    }
    let (again, restarted_at) = match request.from {
        Some(step) => {
            let again = from_step(plan, step)
                .ok_or_else(|| Refused::UnknownStep(step.into(), ended.run_id.clone()))?;
            (again, step.to_string())
        }
        None if ended.state.phase == RunPhase::Succeeded => {
            return Err(Refused::NothingFailed(ended.run_id.clone()))
        }
        None => (retry_groups(plan, ended), failed_path(plan, ended)),
    };
    // An approval is for one run: every gate asks again, and what it gates waits for it.
    let again: BTreeSet<String> = again.into_iter().chain(gated(plan)).collect();
    let mut run = StoredRun {
        run_id: request.id.to_string(),
        generation: ended.generation,
        trigger: ended.trigger.clone(),
        spec: ended.spec.clone(),
        started_at: request.now,
        vars: ended.vars.clone(),
        includes: ended.includes.clone(),
        beside: ended.beside.clone(),
        retry_of: Some(ended.run_id.clone()),
        retried_from: Some(restarted_at),
        retry_token: Some(request.token.to_string()),
        run_token: ended.run_token.clone(),
        previous: ended.with_previous(vec![ended.ended(StopCause::Replaced, request.now)]),
        ..Default::default()
    };
    // A step fetched again brings its steps again.
    run.includes.retain(|node, _| !again.contains(node));
    for (id, inst) in &ended.state.instances {
        let (node, _) = split_instance_id(id);
        if again.contains(&node) || !kept(inst.phase) {
            continue;
        }
        let mut inst = inst.clone();
        inst.job_node = None;
        run.state.instances.insert(id.clone(), inst);
    }
    Ok(run)
}

/// Every `approval` step and every node after one.
fn gated(plan: &Plan) -> BTreeSet<String> {
    let mut todo: Vec<String> = plan
        .nodes()
        .filter(|n| super::awaits_decision(n))
        .map(|n| n.id.clone())
        .collect();
    let mut gated = BTreeSet::new();
    while let Some(id) = todo.pop() {
        if gated.insert(id.clone()) {
            todo.extend(plan.outgoing(&id).into_iter().map(|(to, _)| to.to_string()));
        }
    }
    gated
}

/// An instance that ended well is not run again. A failed one is, even when a handler let the
/// run go on past it (`continueOnError`, `onError`): a retry is a second chance for every failure.
fn kept(phase: Phase) -> bool {
    matches!(phase, Phase::Succeeded | Phase::Skipped)
}

/// Nodes to run again whole when retrying the failure: every `retry` group around an instance
/// that did not end well (so its attempts start afresh). Other instances are kept or not one
/// by one: a node rollout keeps the nodes that succeeded.
fn retry_groups(plan: &Plan, ended: &StoredRun) -> BTreeSet<String> {
    let failed: BTreeSet<String> = ended
        .state
        .instances
        .iter()
        .filter(|(_, i)| !kept(i.phase))
        .map(|(id, _)| split_instance_id(id).0)
        .collect();
    let groups: Vec<&PlanNode> = failed
        .iter()
        .filter_map(|id| plan.node(id))
        .flat_map(|n| enclosing_retries(plan, n))
        .collect();
    groups
        .into_iter()
        .flat_map(|start| group_nodes(plan, start))
        .collect()
}

/// The `retry` starts enclosing `node`, innermost first.
fn enclosing_retries<'p>(plan: &'p Plan, node: &PlanNode) -> Vec<&'p PlanNode> {
    let mut out = Vec::new();
    let mut parent = node.parent.as_deref();
    while let Some(end) = parent.and_then(|id| plan.node(id)) {
        let NodeKind::CompoundEnd { start, .. } = &end.kind else {
            break;
        };
        if let Some(s) = plan.node(start) {
            if matches!(s.kind, NodeKind::RetryStart { .. }) {
                out.push(s);
            }
        }
        parent = end.parent.as_deref();
    }
    out
}

/// A compound's start, its end and every node inside it.
fn group_nodes(plan: &Plan, start: &PlanNode) -> Vec<String> {
    let Some(end) = plan
        .nodes()
        .find(|n| matches!(&n.kind, NodeKind::CompoundEnd { start: s, .. } if *s == start.id))
    else {
        return vec![start.id.clone()];
    };
    let inside = |n: &PlanNode| {
        let mut parent = n.parent.as_deref();
        while let Some(p) = parent {
            if p == end.id {
                return true;
            }
            parent = plan.node(p).and_then(|e| e.parent.as_deref());
        }
        false
    };
    plan.nodes()
        .filter(|n| n.id == start.id || n.id == end.id || inside(n))
        .map(|n| n.id.clone())
        .collect()
}

/// The nodes of step `step` (by name or path: a compound with everything inside it) and every
/// node after them; None when no node is that step.
fn from_step(plan: &Plan, step: &str) -> Option<BTreeSet<String>> {
    let path = plan
        .nodes()
        .find(|n| n.name.as_deref() == Some(step) || n.path == step)?
        .path
        .clone();
    let under = |p: &str| {
        p == path
            || p.strip_prefix(path.as_str())
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
    };
    let mut again = BTreeSet::new();
    let mut todo: Vec<String> = plan
        .nodes()
        .filter(|n| under(&n.path))
        .map(|n| n.id.clone())
        .collect();
    while let Some(id) = todo.pop() {
        if again.insert(id.clone()) {
            todo.extend(plan.outgoing(&id).into_iter().map(|(to, _)| to.to_string()));
        }
    }
    Some(again)
}

/// The path (or name) of the step whose failure ended `ended`.
fn failed_path(plan: &Plan, ended: &StoredRun) -> String {
    let Some((id, _)) = &ended.state.failure else {
        return String::new();
    };
    let (node, _) = split_instance_id(id);
    plan.node(&node)
        .map(|n| n.name.clone().unwrap_or_else(|| n.path.clone()))
        .unwrap_or(node)
}

#[cfg(test)]
mod tests;
