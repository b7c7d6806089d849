//! The pure run-time of a flow: what the controller decides while a run goes on, with no I/O.
//! The DAG walk (this module; rules in `docs/dag.md`): given the plan, the run state and the
//! time, decide which node instances start, which are skipped, which are aborted, and when to
//! wake up. Steps that `include`/`includeFlow` fetched become part of the plan ([`includes`]),
//! controller-local nodes (`log`, `eval`, `template`, a loop's items) are evaluated without a
//! pod ([`local`]), and JSON read back from the API is bounded in depth ([`depth`]).
//! Deterministic: the reconcile loop feeds it observations and performs its actions.
#![warn(missing_docs)]

pub mod depth;
pub mod fold;
pub mod includes;
pub mod limits;
pub mod local;
pub mod retry;
pub mod select;
mod state;
mod stored;

use std::collections::{BTreeMap, HashMap};

use pseudoflow_compiler::plan::{EdgeKind, LoopOver, NodeKind, Plan, PlanNode};
use pseudoflow_crd::common::RunOn;
use pseudoflow_crd::StepKind;
use serde_json::Value;

pub use state::{instance_id, Instance, Key, Phase, RunPhase, RunState};
pub use stored::{EndedRun, StopCause, StoredRun, RUN_STATE_TOO_LARGE};

use crate::limits::{bounded, MAX_INSTANCES, MAX_INSTANCE_MESSAGE_CHARS};

/// The pseudo node id a run-level timeout is recorded under in [`RunState::failure`].
pub const RUN_TIMEOUT: &str = "run-timeout";
/// The pseudo node id a run stopped on request (`ops.example.com/stop`, `kubectl pf stop`) is
/// recorded under in [`RunState::failure`]: the run reads `Aborted`, not `Failed`.
pub const RUN_STOPPED: &str = "run-stopped";

/// Something the reconcile loop must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Do this instance's work: launch its Job, or (for controller-local nodes) do it now and
    /// report back with [`Walker::complete`].
    Start {
        /// The DAG node.
        node: String,
        /// Which loop item(s) of it.
        key: Key,
        /// The retry attempt (1-based).
        attempt: u32,
    },
    /// Stop this instance's work (delete its Job); it is already marked Aborted.
    Abort {
        /// The DAG node.
        node: String,
        /// Which loop item(s) of it.
        key: Key,
    },
}

/// What one [`Walker::advance`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// What to do now, in order.
    pub actions: Vec<Action>,
    /// Earliest time (unix seconds) a timer (sleep, retry backoff) needs another look.
    pub wake_at: Option<i64>,
}

/// The result of one instance's work.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    /// Whether the work succeeded.
    pub ok: bool,
    /// Whether it changed anything (for `onlyIfChanged` and status).
    pub changed: bool,
    /// What happened, for status and Events.
    pub message: String,
    /// For conditions: whether the condition holds.
    pub condition: Option<bool>,
    /// For loop starts: the items (key, value).
    pub items: Option<Vec<(String, Value)>>,
}

impl From<crate::local::LocalCompletion> for Completion {
    fn from(local: crate::local::LocalCompletion) -> Self {
        Completion {
            ok: local.ok,
            message: local.message,
            items: local.items,
            ..Default::default()
        }
    }
}

/// Why a loop cannot take the items it evaluated to (the loop start fails with it).
#[derive(Debug, thiserror::Error)]
enum NoRoom {
    #[error(transparent)]
    Limit(#[from] pseudoflow_compiler::limits::LimitError),
    #[error(
        "{items} items of {body} steps each would make the run hold {total} step instances, more \
         than the limit of {MAX_INSTANCES}"
    )]
    Instances {
        items: usize,
        body: usize,
        total: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edge {
    Unsettled,
    Taken,
    NotTaken,
}

enum Readiness {
    NotYet,
    Wait(i64),
    Ready,
    Skip,
    /// An any-of join whose inputs all settled without one success.
    Fail(String),
}

/// Walks one plan; cheap to build, holds no run state.
pub struct Walker<'p> {
    plan: &'p Plan,
    /// Node ids in the order the compiler stored ([`Plan::creation_order`]).
    order: &'p [String],
    /// For each node, the compound ends enclosing it, innermost first.
    ancestors: HashMap<String, Vec<String>>,
    /// A suspended run (`spec.suspend`): nothing new starts; what runs finishes, timeouts apply.
    hold: bool,
}

impl<'p> Walker<'p> {
    /// Prepares the walk of `plan`.
    pub fn new(plan: &'p Plan) -> Self {
        let order = plan.creation_order();
        let mut ancestors = HashMap::new();
        for n in plan.nodes() {
            let mut chain = Vec::new();
            let mut parent = n.parent.clone();
            while let Some(p) = parent {
                parent = plan.node(&p).and_then(|e| e.parent.clone());
                chain.push(p);
            }
            ancestors.insert(n.id.clone(), chain);
        }
        Walker {
            plan,
            order,
            ancestors,
            hold: false,
        }
    }

    /// The same walk, holding every instance that would start now while `hold` is true (a
    /// suspended flow): running work still finishes, fails, times out and is folded in.
    pub fn holding(mut self, hold: bool) -> Self {
        self.hold = hold;
        self
    }

    /// The plan being walked.
    pub fn plan(&self) -> &'p Plan {
        self.plan
    }

    fn node(&self, id: &str) -> &'p PlanNode {
        self.plan.node(id).expect("node ids come from the plan")
    }

    /// The attempt an instance runs in: its innermost enclosing retry group's attempt (1 outside).
    pub fn attempt_of(&self, node: &str, key: &[String], state: &RunState) -> u32 {
        for end in &self.ancestors[node] {
            if let NodeKind::CompoundEnd { start, .. } = &self.node(end).kind {
                if matches!(self.node(start).kind, NodeKind::RetryStart { .. }) {
                    let depth = self.node(start).loops.len();
                    return state.get(start, &key[..depth]).attempt.max(1);
                }
            }
        }
        1
    }

    /// Every instance key a node has given what is known (loop items evaluated so far).
    pub fn keys(&self, node: &PlanNode, state: &RunState) -> Vec<Key> {
        let Some(last) = node.loops.last() else {
            return vec![vec![]];
        };
        let start = self.node(last);
        let mut out = Vec::new();
        for k in self.keys(start, state) {
            if let Some(items) = state.get(&start.id, &k).items {
                for (item, _) in items {
                    let mut key = k.clone();
                    key.push(item);
                    out.push(key);
                }
            }
        }
        out
    }

    /// Applies every decision that can be made now; returns the work to do.
    pub fn advance(&self, state: &mut RunState, now: i64) -> Outcome {
        let mut out = Outcome::default();
        loop {
            if state.phase != RunPhase::Running {
                break;
            }
            let mut progressed = self.time_out_bodies(state, now, &mut out);
            if state.phase != RunPhase::Running {
                break;
            }
            let mut loop_cache: HashMap<String, LoopProgress> = HashMap::new();
            for id in self.order {
                let node = self.node(id);
                for key in self.keys(node, state) {
                    let inst = state.get(id, &key);
                    match inst.phase {
                        Phase::Pending => {
                            match self.readiness(node, &key, state, now, &mut loop_cache) {
                                Readiness::NotYet => {}
                                Readiness::Wait(t) => {
                                    out.wake_at = Some(out.wake_at.map_or(t, |w| w.min(t)))
                                }
                                Readiness::Skip => {
                                    state.entry(id, &key).phase = Phase::Skipped;
                                    progressed = true;
                                }
                                Readiness::Fail(msg) => {
                                    self.fail(state, id, &key, msg, now, &mut out);
                                    progressed = true;
                                }
                                Readiness::Ready if self.hold => {}
                                Readiness::Ready => {
                                    self.start(state, node, &key, now, &mut out);
                                    progressed = true;
                                }
                            }
                        }
                        Phase::Running => {
                            progressed |= self.timer(state, node, &key, now, &mut out);
                        }
                        _ => {}
                    }
                    if state.phase != RunPhase::Running {
                        break;
                    }
                }
                if progressed {
                    // Re-evaluate from the top so loop caches and item lists are fresh.
                    break;
                }
            }
            if !progressed {
                break;
            }
        }
        out
    }

    /// A running instance the controller times itself: a `sleep` (one fused into a segment
    /// waits in its Job's pod instead) ends, an `approval` waiting past its `timeoutSeconds`
    /// fails. Returns whether it settled.
    fn timer(
        &self,
        state: &mut RunState,
        node: &PlanNode,
        key: &Key,
        now: i64,
        out: &mut Outcome,
    ) -> bool {
        let sleeps = node.segment.is_none() && waits(node).is_some();
        if !sleeps && !awaits_decision(node) {
            return false;
        }
        match state.get(&node.id, key).not_before {
            Some(t) if t <= now => {
                if awaits_decision(node) {
                    let secs = node.timeout_seconds.unwrap_or_default();
                    let msg = format!(
                        "timed out after {secs}s waiting for approval: {}",
                        step_label(node)
                    );
                    self.fail(state, &node.id, key, msg, now, out);
                } else if let Some(secs) = sleep_timeout(node) {
                    let msg = format!("timed out after {secs}s");
                    self.fail(state, &node.id, key, msg, now, out);
                } else {
                    let e = state.entry(&node.id, key);
                    e.phase = Phase::Succeeded;
                    e.finished_at = Some(now);
                }
                true
            }
            Some(t) => {
                out.wake_at = Some(out.wake_at.map_or(t, |w| w.min(t)));
                false
            }
            None => false,
        }
    }

    /// The `approval` instances waiting for a decision: node, key, and when each began waiting
    /// (unix seconds).
    pub fn awaiting_decision(&self, state: &RunState) -> Vec<(&'p PlanNode, Key, i64)> {
        let mut out = Vec::new();
        for (id, inst) in &state.instances {
            if inst.phase != Phase::Running {
                continue;
            }
            let (node, key) = split_instance_id(id);
            if let Some(n) = self.plan.node(&node).filter(|n| awaits_decision(n)) {
                out.push((n, key, inst.started_at.unwrap_or_default()));
            }
        }
        out
    }

    fn start(&self, state: &mut RunState, node: &PlanNode, key: &Key, now: i64, out: &mut Outcome) {
        let attempt = self.attempt_of(&node.id, key, state);
        let inst = state.entry(&node.id, key);
        inst.started_at = Some(now);
        inst.attempt = attempt;
        match &node.kind {
            NodeKind::CompoundEnd {
                wait_for_all: false,
                ..
            } => {
                // The first success ends the join: what still runs in the other branches stops.
                inst.phase = Phase::Succeeded;
                inst.finished_at = Some(now);
                self.abort_inside(state, &node.id, key, out);
            }
            NodeKind::Start | NodeKind::Fork { .. } | NodeKind::CompoundEnd { .. } => {
                inst.phase = Phase::Succeeded;
                inst.finished_at = Some(now);
            }
            NodeKind::End => {
                inst.phase = Phase::Succeeded;
                inst.finished_at = Some(now);
                state.phase = RunPhase::Succeeded;
            }
            NodeKind::RetryStart { .. } => {
                inst.phase = Phase::Succeeded;
                inst.finished_at = Some(now);
                inst.attempt = inst.attempt.max(1);
            }
            _ => {
                inst.phase = Phase::Running;
                if awaits_decision(node) {
                    // Nothing runs it: the reconcile completes it when a decision arrives.
                    inst.message = format!("waiting for approval: {}", step_label(node));
                    if let Some(secs) = node.timeout_seconds {
                        let at = now + i64::from(secs);
                        inst.not_before = Some(at);
                        out.wake_at = Some(out.wake_at.map_or(at, |w| w.min(at)));
                    }
                    return;
                }
                if let Some(seconds) = waits(node) {
                    if node.kind == NodeKind::Action && node.segment.is_none() {
                        // A timeout shorter than the sleep ends it early, as a failure.
                        let secs = sleep_timeout(node).unwrap_or(seconds);
                        let at = now + i64::from(secs);
                        inst.not_before = Some(at);
                        out.wake_at = Some(out.wake_at.map_or(at, |w| w.min(at)));
                        return;
                    }
                }
                out.actions.push(Action::Start {
                    node: node.id.clone(),
                    key: key.clone(),
                    attempt,
                });
            }
        }
    }

    /// Records the result of an instance's work, handling a failure as `docs/dag.md` says.
    pub fn complete(
        &self,
        state: &mut RunState,
        node: &str,
        key: &[String],
        c: Completion,
        now: i64,
    ) -> Outcome {
        let mut out = Outcome::default();
        let mut c = c;
        if state.get(node, key).phase != Phase::Running {
            return out;
        }
        if let Some(items) = &c.items {
            if let Err(why) = self.room_for(state, node, items.len()) {
                c = Completion {
                    ok: false,
                    message: why.to_string(),
                    ..Default::default()
                };
            }
        }
        {
            let inst = state.entry(node, key);
            inst.changed = c.changed;
            inst.message = bounded(&c.message, MAX_INSTANCE_MESSAGE_CHARS);
            inst.condition = c.condition;
            inst.items = c.items;
            inst.finished_at = Some(now);
            inst.phase = if c.ok {
                Phase::Succeeded
            } else {
                Phase::Running
            };
        }
        if !c.ok {
            self.fail(state, node, &key.to_vec(), c.message, now, &mut out);
        }
        out
    }

    /// Marks an instance Failed and decides who handles it (docs/dag.md, rule 3).
    fn fail(
        &self,
        state: &mut RunState,
        node: &str,
        key: &Key,
        message: String,
        now: i64,
        out: &mut Outcome,
    ) {
        let message = bounded(&message, MAX_INSTANCE_MESSAGE_CHARS);
        {
            let inst = state.entry(node, key);
            inst.phase = Phase::Failed;
            inst.message = message.clone();
            inst.finished_at.get_or_insert(now);
        }
        let handled_here = self
            .plan
            .outgoing(node)
            .iter()
            .any(|(_, k)| matches!(k, EdgeKind::OnFailure | EdgeKind::Always));
        if handled_here {
            state.entry(node, key).failure_handled = true;
            return;
        }
        let Some(end_id) = self.node(node).parent.clone() else {
            state.entry(node, key).failure_handled = true;
            self.fail_run(state, node, key, &message, out);
            return;
        };
        let end = self.node(&end_id);
        let end_key: Key = key[..end.loops.len()].to_vec();
        let NodeKind::CompoundEnd {
            start,
            wait_for_all,
            run_on,
        } = &end.kind
        else {
            unreachable!("parents are compound ends")
        };
        if !*wait_for_all || *run_on == Some(RunOn::Any) {
            // An any-of join decides once every input has settled.
            state.entry(node, key).failure_handled = true;
            return;
        }
        if let NodeKind::RetryStart { attempts, .. } = &self.node(start).kind {
            let attempt = state.get(start, &end_key).attempt.max(1);
            if attempt < *attempts {
                self.reset_inside(state, &end_id, &end_key, out);
                let backoff = match self.node(start).step.as_ref().map(|s| &s.kind) {
                    Some(StepKind::Retry(r)) => r.backoff_before(attempt + 1),
                    _ => 0,
                };
                let s = state.entry(start, &end_key);
                s.attempt = attempt + 1;
                s.not_before = Some(now + backoff as i64);
                s.message = format!("attempt {} failed: {message}", attempt);
                return;
            }
        }
        state.entry(node, key).failure_handled = true;
        self.abort_inside(state, &end_id, &end_key, out);
        // Name the failed step by its path and loop item (for loopNodes: the node), as a
        // person reads them in the spec; the node id means nothing outside the plan.
        let at = if key.is_empty() {
            String::new()
        } else {
            format!(" [{}]", key.join("/"))
        };
        let msg = format!("{}{at}: {message}", self.node(node).path);
        self.fail(state, &end_id, &end_key, msg, now, out);
    }

    /// Whether loop start `node` may take `items` items: every item instantiates the loop's
    /// body, and one run holds at most [`MAX_INSTANCES`] instances (a forEach over a huge list
    /// must not become a run state nobody can store, or thousands of Jobs).
    fn room_for(&self, state: &RunState, node: &str, items: usize) -> Result<(), NoRoom> {
        use pseudoflow_compiler::limits::{
            check_loop_items, check_loop_nodes, check_run_iterations,
        };
        let start = self.node(node);
        let per_loop = match &start.kind {
            NodeKind::LoopStart {
                over: LoopOver::Nodes { .. },
                ..
            } => check_loop_nodes(&start.path, items),
            _ => check_loop_items(&start.path, items),
        };
        per_loop?;
        // Iterations this run already took (every loop start's items), plus these.
        let taken: usize = state
            .instances
            .values()
            .filter_map(|i| i.items.as_ref().map(Vec::len))
            .sum();
        check_run_iterations(&start.path, taken.saturating_add(items))?;
        let body = self
            .plan
            .nodes()
            .filter(|n| n.loops.iter().any(|l| l == node))
            .count();
        let total = state
            .instances
            .len()
            .saturating_add(items.saturating_mul(body));
        if total > MAX_INSTANCES {
            return Err(NoRoom::Instances { items, body, total });
        }
        Ok(())
    }

    /// Structural steps whose `timeoutSeconds` passed while their body still runs: what runs
    /// inside stops (its Jobs are deleted) and the step fails, handled as any failure of it
    /// (`continueOnError`, an enclosing retry). The clock starts when the step starts and
    /// covers every attempt of a retry. Returns whether one timed out.
    fn time_out_bodies(&self, state: &mut RunState, now: i64, out: &mut Outcome) -> bool {
        let mut timed_out = false;
        for id in self.order {
            let node = self.node(id);
            let Some((end, secs)) = body_timeout(node) else {
                continue;
            };
            for key in self.keys(node, state) {
                let start = state.get(id, &key);
                let Some(started) = start.started_at else {
                    continue;
                };
                if !matches!(start.phase, Phase::Running | Phase::Succeeded) {
                    continue;
                }
                let end_key: Key = key[..self.node(end).loops.len()].to_vec();
                if state.get(end, &end_key).phase.settled() {
                    continue;
                }
                let deadline = started + i64::from(secs);
                if now < deadline {
                    out.wake_at = Some(out.wake_at.map_or(deadline, |w| w.min(deadline)));
                    continue;
                }
                if start.phase == Phase::Running {
                    // Still at its own work (listing nodes, fetching a flow).
                    state.entry(id, &key).phase = Phase::Aborted;
                    out.actions.push(Action::Abort {
                        node: id.clone(),
                        key: key.clone(),
                    });
                }
                self.abort_inside(state, end, &end_key, out);
                let message = format!("timed out after {secs}s (its timeoutSeconds)");
                self.fail(state, end, &end_key, message, now, out);
                timed_out = true;
                if state.phase != RunPhase::Running {
                    return true;
                }
            }
        }
        timed_out
    }

    /// Ends a running run as Failed because its `options.timeoutSeconds` passed; running
    /// instances are aborted (their Jobs must be deleted).
    pub fn time_out(&self, state: &mut RunState, message: &str) -> Outcome {
        let mut out = Outcome::default();
        if state.phase == RunPhase::Running {
            self.fail_run(state, RUN_TIMEOUT, &[], message, &mut out);
        }
        out
    }

    /// Ends a running run because it was asked to stop: running instances are aborted (their
    /// Jobs must be deleted), nothing else starts (no `onError`/`finally` step either: a stop
    /// ends the run now). Recorded under [`RUN_STOPPED`], so the run reads Aborted.
    pub fn stop(&self, state: &mut RunState, message: &str) -> Outcome {
        let mut out = Outcome::default();
        if state.phase == RunPhase::Running {
            self.fail_run(state, RUN_STOPPED, &[], message, &mut out);
        }
        out
    }

    fn fail_run(
        &self,
        state: &mut RunState,
        node: &str,
        key: &[String],
        message: &str,
        out: &mut Outcome,
    ) {
        for (node, key) in state.end_failed(&instance_id(node, key), message) {
            out.actions.push(Action::Abort { node, key });
        }
    }

    /// Instances of nodes inside compound `end` (at `end_key`), with their ids.
    fn inside(&self, state: &RunState, end: &str, end_key: &[String]) -> Vec<String> {
        state
            .instances
            .keys()
            .filter(|id| {
                let (node, key) = split_instance_id(id);
                self.ancestors
                    .get(&node)
                    .is_some_and(|a| a.iter().any(|e| e == end))
                    && key.starts_with(end_key)
            })
            .cloned()
            .collect()
    }

    fn abort_inside(&self, state: &mut RunState, end: &str, end_key: &[String], out: &mut Outcome) {
        for id in self.inside(state, end, end_key) {
            let inst = state.instances.get_mut(&id).unwrap();
            if inst.phase == Phase::Running || inst.phase == Phase::Pending {
                if inst.phase == Phase::Running {
                    let (node, key) = split_instance_id(&id);
                    out.actions.push(Action::Abort { node, key });
                }
                inst.phase = Phase::Aborted;
            }
        }
    }

    fn reset_inside(&self, state: &mut RunState, end: &str, end_key: &[String], out: &mut Outcome) {
        for id in self.inside(state, end, end_key) {
            if let Some(inst) = state.instances.remove(&id) {
                if inst.phase == Phase::Running {
                    let (node, key) = split_instance_id(&id);
                    out.actions.push(Action::Abort { node, key });
                }
            }
        }
    }

    fn readiness(
        &self,
        node: &PlanNode,
        key: &Key,
        state: &RunState,
        now: i64,
        cache: &mut HashMap<String, LoopProgress>,
    ) -> Readiness {
        if node.kind == NodeKind::Start {
            return Readiness::Ready;
        }
        let mut statuses = Vec::new();
        for (src, kind) in self.plan.incoming(&node.id) {
            let src_node = self.node(src);
            let status = match src_node.loops.len().cmp(&node.loops.len()) {
                std::cmp::Ordering::Equal => {
                    let src_inst = state.get(src, key);
                    // A retry's next attempt waits for its backoff.
                    if let (EdgeKind::Body, Some(t)) =
                        (kind, src_inst.not_before.filter(|t| *t > now))
                    {
                        return Readiness::Wait(t);
                    }
                    edge(kind, &src_inst)
                }
                std::cmp::Ordering::Less => {
                    match self.body_edge(src_node, node, key, state, now, cache) {
                        Ok(s) => s,
                        Err(wait) => return Readiness::Wait(wait),
                    }
                }
                std::cmp::Ordering::Greater => {
                    let start = self.node(&src_node.loops[node.loops.len()]);
                    let s_inst = state.get(&start.id, key);
                    match (&s_inst.items, s_inst.phase) {
                        (Some(items), _) => {
                            let per_item: Vec<Edge> = items
                                .iter()
                                .map(|(item, _)| {
                                    let mut k = key.clone();
                                    k.push(item.clone());
                                    edge(kind, &state.get(src, &k))
                                })
                                .collect();
                            return self.fan_in(node, &per_item, &s_inst);
                        }
                        (None, p) if p.settled() => Edge::NotTaken,
                        (None, _) => Edge::Unsettled,
                    }
                }
            };
            statuses.push(status);
        }
        let wait_for_all = !matches!(
            node.kind,
            NodeKind::CompoundEnd {
                wait_for_all: false,
                ..
            }
        );
        if !wait_for_all && statuses.contains(&Edge::Taken) {
            return Readiness::Ready;
        }
        if statuses.contains(&Edge::Unsettled) {
            return Readiness::NotYet;
        }
        if statuses.contains(&Edge::Taken) {
            return Readiness::Ready;
        }
        if !wait_for_all {
            if let NodeKind::CompoundEnd { start, .. } = &node.kind {
                if state.get(start, key).phase == Phase::Succeeded {
                    return Readiness::Fail("no branch succeeded".into());
                }
            }
        }
        Readiness::Skip
    }

    /// A loop end over its items: all must succeed, or (runOn any) one of them.
    fn fan_in(&self, end: &PlanNode, per_item: &[Edge], start: &Instance) -> Readiness {
        if per_item.contains(&Edge::Unsettled) {
            return Readiness::NotYet;
        }
        let any = matches!(
            end.kind,
            NodeKind::CompoundEnd {
                run_on: Some(RunOn::Any),
                ..
            }
        );
        let taken = per_item.iter().filter(|e| **e == Edge::Taken).count();
        if any {
            return if taken > 0 {
                Readiness::Ready
            } else {
                Readiness::Fail("no node succeeded".into())
            };
        }
        if taken == per_item.len() || start.phase == Phase::Succeeded && per_item.is_empty() {
            Readiness::Ready
        } else {
            Readiness::Skip
        }
    }

    /// A `body` edge from a loop start into item `key.last()`: taken when the start succeeded and
    /// the item is admitted (earlier items started, fewer than maxParallel active).
    fn body_edge(
        &self,
        start: &PlanNode,
        entry: &PlanNode,
        key: &Key,
        state: &RunState,
        now: i64,
        cache: &mut HashMap<String, LoopProgress>,
    ) -> Result<Edge, i64> {
        let outer = &key[..start.loops.len()];
        let s = state.get(&start.id, outer);
        if !s.phase.settled() {
            return Ok(Edge::Unsettled);
        }
        if s.phase != Phase::Succeeded {
            return Ok(Edge::NotTaken);
        }
        if let Some(t) = s.not_before.filter(|t| *t > now) {
            return Err(t);
        }
        let NodeKind::LoopStart {
            max_parallel,
            end,
            over,
        } = &start.kind
        else {
            return Ok(Edge::Taken);
        };
        if state.get(end, outer).phase.settled() {
            return Ok(Edge::NotTaken);
        }
        let limit = match (max_parallel, over) {
            (Some(m), _) => *m as usize,
            (None, LoopOver::Nodes { .. }) if start.step_type.ends_with("-nodes") => usize::MAX,
            (None, _) => 1,
        };
        let items = s.items.clone().unwrap_or_default();
        let Some(index) = items.iter().position(|(k, _)| Some(k) == key.last()) else {
            return Ok(Edge::NotTaken);
        };
        let progress = cache
            .entry(instance_id(&start.id, outer))
            .or_insert_with(|| self.loop_progress(start, entry, outer, &items, end, state));
        // Items start in order: only the next unstarted one, and only while a slot is free.
        Ok(if index == progress.started && progress.active < limit {
            Edge::Taken
        } else {
            Edge::Unsettled
        })
    }

    fn loop_progress(
        &self,
        _start: &PlanNode,
        entry: &PlanNode,
        outer: &[String],
        items: &[(String, Value)],
        end: &str,
        state: &RunState,
    ) -> LoopProgress {
        let exits: Vec<&str> = self
            .plan
            .incoming(end)
            .into_iter()
            .map(|(src, _)| src)
            .collect();
        let mut progress = LoopProgress::default();
        for (item, _) in items {
            let mut k = outer.to_vec();
            k.push(item.clone());
            if state.get(&entry.id, &k).phase == Phase::Pending {
                break;
            }
            progress.started += 1;
            let done = exits.iter().all(|x| state.get(x, &k).phase.settled());
            if !done {
                progress.active += 1;
            }
        }
        progress
    }

    /// The vars a node instance sees from its enclosing loops: `item`/`index` and `node`.
    pub fn loop_vars(
        &self,
        node: &PlanNode,
        key: &[String],
        state: &RunState,
    ) -> BTreeMap<String, Value> {
        let mut vars = BTreeMap::new();
        for (depth, loop_id) in node.loops.iter().enumerate() {
            let start = self.node(loop_id);
            let s = state.get(loop_id, &key[..depth]);
            let Some(items) = s.items else { continue };
            let Some((pos, (item_key, value))) = items
                .iter()
                .enumerate()
                .find(|(_, (k, _))| k == &key[depth])
            else {
                continue;
            };
            match &start.kind {
                NodeKind::LoopStart {
                    over: LoopOver::Nodes { .. },
                    ..
                } => {
                    vars.insert("node".into(), Value::String(item_key.clone()));
                }
                _ => {
                    vars.insert("item".into(), value.clone());
                    vars.insert("index".into(), Value::from(pos));
                }
            }
        }
        vars
    }
}

#[derive(Default)]
struct LoopProgress {
    /// Items (a prefix, in order) whose body has started.
    started: usize,
    /// Of those, how many have not finished.
    active: usize,
}

/// A `sleep` step's `timeoutSeconds` when it is shorter than the sleep (the sleep then fails).
/// A structural step's closing node and the seconds its `timeoutSeconds` gives its body.
fn body_timeout(node: &PlanNode) -> Option<(&str, u32)> {
    let step = node.step.as_ref()?;
    let secs = step.timeout_seconds?;
    if !step.kind.params().times_its_body() {
        return None;
    }
    let end = match &node.kind {
        NodeKind::LoopStart { end, .. }
        | NodeKind::Fork { end }
        | NodeKind::RetryStart { end, .. }
        | NodeKind::Include { end }
        | NodeKind::IncludeFlow { end, .. } => end,
        _ => return None,
    };
    Some((end.as_str(), secs))
}

fn sleep_timeout(node: &PlanNode) -> Option<u32> {
    let seconds = waits(node)?;
    node.timeout_seconds.filter(|t| *t < seconds)
}

/// Whether `node` waits for a person's decision (an `approval` step).
pub fn awaits_decision(node: &PlanNode) -> bool {
    node.kind == NodeKind::Action
        && node
            .step_kind()
            .is_some_and(|k| k.params().awaits_decision())
}

/// A step as people name it: its `name`, else its path.
pub fn step_label(node: &PlanNode) -> String {
    node.name.clone().unwrap_or_else(|| node.path.clone())
}

/// How long `node` only waits (a `sleep`), if that is all it does.
fn waits(node: &PlanNode) -> Option<u32> {
    node.step_kind()?.params().waits_seconds()
}

fn edge(kind: EdgeKind, inst: &Instance) -> Edge {
    match inst.phase {
        Phase::Pending | Phase::Running => Edge::Unsettled,
        Phase::Skipped | Phase::Aborted => Edge::NotTaken,
        Phase::Succeeded => match kind {
            EdgeKind::Next | EdgeKind::Always | EdgeKind::Branch | EdgeKind::Body => Edge::Taken,
            EdgeKind::OnFailure => Edge::NotTaken,
            EdgeKind::Then if inst.condition == Some(true) => Edge::Taken,
            EdgeKind::Else if inst.condition == Some(false) => Edge::Taken,
            EdgeKind::Then | EdgeKind::Else => Edge::NotTaken,
        },
        Phase::Failed => match kind {
            EdgeKind::Always | EdgeKind::OnFailure => Edge::Taken,
            _ => Edge::NotTaken,
        },
    }
}

/// Inverse of [`instance_id`].
pub fn split_instance_id(id: &str) -> (String, Key) {
    match id.split_once('@') {
        Some((node, key)) => (
            node.to_string(),
            key.split('/').map(str::to_string).collect(),
        ),
        None => (id.to_string(), vec![]),
    }
}

#[cfg(test)]
mod tests;
