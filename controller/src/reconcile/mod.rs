//! The plain-flow reconciler: one reconcile of one flow that runs steps, read top to bottom —
//! load the stored run, select the run to drive (concurrencyPolicy, deletion), observe its Jobs
//! and fold their results, let the walker advance and launch what it says, then save the run
//! state and write status. Level-triggered and restartable: everything it needs is in the API.
//! The dispatch above it ([`crate::serve`]) compiled the flow and chose this reconciler; it knows
//! nothing of bound flows (what both share is [`crate::flow`]).

pub mod history;
mod job_reports;
mod launch;
mod load;
mod narrate;
pub mod node_health;
mod observe;
pub mod on_delete;
pub mod pod_security;
mod retry;
mod run;
pub mod runs;
mod schedule;
pub mod seal;
mod select;
mod size;
mod start;
mod stop;
pub mod store;
mod timing;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::runtime::controller::Action;
use pseudoflow_compiler::lower::launches_jobs;
use pseudoflow_compiler::plan::Plan;
use pseudoflow_compiler::Compiled;
use pseudoflow_crd::{PseudoFlowSpec, PseudoFlowStatus};
use serde_json::Value;
use tracing::warn;

use crate::flow::{outcome, status, Error, Reconciling};
use crate::limits::MAX_RUN_STATE_BYTES;
use pseudoflow_walk::fold::earliest;
use pseudoflow_walk::{RunPhase, StoredRun};
use run::{advance_run, finish_if_done};
use runs::Runs;
use select::Selected;
use start::requeue_at;

/// One reconcile of a plain flow, as the plain-flow reconciler sees it.
pub(crate) type Reconcile<'a> = Reconciling<'a, Runs>;

/// What a reconcile of a plain flow ended with.
pub(crate) struct Ran {
    /// When to look again.
    pub action: Action,
    /// The status it wrote, when it drove a run.
    pub shown: Option<Shown>,
}

/// The status a reconcile wrote and what it was made from: what a flow made for a bound object
/// writes back to that object ([`crate::bind::write_back`]).
pub(crate) struct Shown {
    /// The run's spec, compiled.
    pub spec: PseudoFlowSpec,
    /// The flow's status as written.
    pub status: PseudoFlowStatus,
    /// The run's variables.
    pub vars: BTreeMap<String, Value>,
}

impl Ran {
    fn done(action: Action) -> Self {
        Ran {
            action,
            shown: None,
        }
    }
}

/// Reconciles a plain flow, `compiled` from its spec.
pub(crate) async fn reconcile_run(r: &Reconcile<'_>, compiled: Compiled) -> Result<Ran, Error> {
    // Load the stored run.
    let Some((stored, rv)) = r.load().await? else {
        return Ok(Ran::done(Action::await_change()));
    };
    // What is stored now, to skip writes that would change nothing.
    let stored_json = stored.as_ref().map(|s| serde_json::to_value(s).ok());
    // Select the run to drive; stop the runs it replaces. spec.suspend and spec.schedule
    // decide whether a new run starts (deletion always does).
    let sched = schedule::for_flow(r, &compiled.spec, stored.as_ref(), &r.previous, r.deleting);
    let (mut run, queued, rv) = match r.select(&compiled, stored, rv, &sched).await? {
        Selected::Drive { run, queued, rv } => (*run, queued, rv),
        Selected::Done(action) => return Ok(Ran::done(action)),
    };
    // Observe its Jobs, fold their results, advance the walker, launch what it says.
    let (compiled, wake) = r.advance(&mut run).await?;
    // Save the run state and write status. Most wake-ups (a Job's pod started, a status echo)
    // change nothing: no write then.
    if stored_json != Some(serde_json::to_value(&run).ok()) {
        r.save(&run, rv.as_deref()).await?;
    }
    let plan = plan_of(&compiled, r.deleting);
    let status = r
        .write_status(plan, &run, queued.as_deref(), &sched)
        .await?;
    r.measure(plan, &run);
    if r.deleting && run.state.phase == RunPhase::Succeeded {
        on_delete::remove(&r.flows, r.flow).await?;
    }
    let action = match earliest(wake, sched.next) {
        None if queued.is_some() => Action::requeue(Duration::from_secs(5)),
        wake => requeue_at(wake, r.now),
    };
    let shown = Shown {
        spec: compiled.spec,
        status,
        vars: run.vars,
    };
    Ok(Ran {
        action,
        shown: Some(shown),
    })
}

impl Reconcile<'_> {
    /// Drives `run` and the runs beside it (Allow), each with its own spec; a run grown too
    /// large to store ends Failed here; a run that ends here lets older runs' objects go
    /// (`history.rs`). Returns the run's spec compiled and when a timer needs the next look.
    async fn advance(&self, run: &mut StoredRun) -> Result<(Compiled, Option<i64>), Error> {
        let (r, deleting) = (self, self.deleting);
        let run_spec = run.spec.clone().unwrap_or_else(|| self.raw_spec.clone());
        let was_running = run.state.phase == RunPhase::Running;
        let (compiled, mut wake) = advance_run(r, &run_spec, run, deleting).await?;
        let made_objects = launches_jobs(plan_of(&compiled, deleting));
        if was_running && run.state.phase != RunPhase::Running && !deleting && made_objects {
            // The run ended: older runs' objects beyond its history limits go. (A run whose
            // steps all ran in the controller made no Job, pod or Secret: nothing to prune, and
            // three lists fewer per run of a bound flow's object.)
            history::prune(r, run, &compiled.spec.options).await;
        }
        // Allow: earlier runs still running go on beside this one, each with its own spec.
        let mut beside = std::mem::take(&mut run.beside);
        for other in &mut beside {
            let spec = other.spec.clone().unwrap_or_else(|| self.raw_spec.clone());
            let (_, w) = advance_run(r, &spec, other, false).await?;
            wake = earliest(wake, w);
        }
        beside.retain(|r| r.state.phase == RunPhase::Running);
        run.beside = beside;
        // A run too large to store ends here, Failed, rather than failing every save after.
        if let Some(over) = size::shrink_to_fit(run, MAX_RUN_STATE_BYTES) {
            warn!("{}", over.message);
            size::stop_jobs(&r.ctx.client, r.ns(), r.uid, &over.stopped).await?;
            // Counted and told once, as any run's end (the stopped ones were running).
            let plan = plan_of(&compiled, deleting);
            finish_if_done(r, plan, run).await;
            for other in &mut run.beside {
                finish_if_done(r, plan, other).await;
            }
            run.beside.retain(|r| r.state.phase == RunPhase::Running);
        }
        Ok((compiled, wake))
    }

    /// The run's metrics: whether it is active; every step type's duration, to the
    /// sub-second; and the steps still running. (Runs beside this one under concurrencyPolicy
    /// Allow have specs of their own and are not timed.)
    fn measure(&self, plan: &Plan, run: &StoredRun) {
        let (metrics, key, uid) = (&self.ctx.metrics, self.key(), self.uid);
        let active = run.state.phase == RunPhase::Running || !run.beside.is_empty();
        // Steps first: a scrape that sees the flow no longer active sees its last steps counted.
        let seen = timing::steps_seen(plan, run);
        metrics.observe_steps(&key, uid, crate::metrics::unix_now(), seen);
        metrics.set_active(&key, uid, active);
    }

    /// Writes the run's status (with the queued run and the schedule), if it changes anything.
    async fn write_status(
        &self,
        plan: &Plan,
        run: &StoredRun,
        queued: Option<&str>,
        sched: &schedule::ScheduleDecision,
    ) -> Result<PseudoFlowStatus, Error> {
        // Whoever sees the phase sees the Events that led to it.
        self.told().await;
        let previous = &self.previous;
        let queued = queued.map(|id| (id, self.generation));
        let mut status = status::of_run(previous, plan, run, run.generation, queued, self.now);
        schedule::stamp(&mut status, sched);
        let sequence = self.own.sequences.get(self.uid);
        status.run_state_sequence = (sequence > 0).then_some(sequence);
        if run.state.phase == RunPhase::Running && !self.deleting && run::suspended(self) {
            status::held(&mut status);
        }
        let patch = status::replacing(previous, &status);
        if status::without_nulls(&patch) != *previous {
            outcome::patch_status(&self.flows, self.flow_id.name, patch).await?;
        }
        Ok(status)
    }
}

/// The plan a reconcile walks: the flow's steps, or its `onDelete` steps while it is deleted.
fn plan_of(compiled: &Compiled, deleting: bool) -> &Plan {
    match (&compiled.on_delete, deleting) {
        (Some(on_delete), true) => on_delete,
        _ => &compiled.plan,
    }
}
