//! One reconcile of one flow, read top to bottom: compile the spec, load the stored run, select
//! the run to drive (concurrencyPolicy, deletion), observe its Jobs and fold their results, let
//! the walker advance and launch what it says, then save the run state and write status.
//! Level-triggered and restartable: everything it needs is in the API.

mod context;
mod error;
pub mod events;
pub(crate) mod finalizer;
mod guard;
pub mod history;
mod job_reports;
mod launch;
mod narrate;
pub mod node_health;
mod observe;
pub(crate) mod outcome;
pub mod pod_security;
mod retry;
mod run;
mod schedule;
pub mod seal;
mod serve;
mod size;
mod start;
pub(crate) mod status;
pub mod store;
mod timing;
mod wake;
mod warnings;

pub use context::Context;
pub(crate) use context::Reconciling;
pub use error::Error;
pub use serve::run_controller;

use std::time::Duration;

use events::EventType;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use pseudoflow_compiler::lower::launches_jobs;
use pseudoflow_compiler::plan::Plan;
use pseudoflow_compiler::{compile, Compiled, FlowId};
use pseudoflow_crd::bind::BIND_FINALIZER;
use serde_json::Value;
use tracing::warn;

use crate::limits::MAX_RUN_STATE_BYTES;
use pseudoflow_walk::fold::earliest;
use pseudoflow_walk::select::{select, wanted_id};
use pseudoflow_walk::{RunPhase, StoredRun};
use run::{advance_run, finish_if_done};
use start::{give_secrets, new_run, requeue_at};

/// The PseudoFlow resource as seen untyped: a flow with a broken nested step must still be read,
/// so the controller can report `InvalidSpec` instead of failing to deserialize it.
pub fn flow_resource() -> ApiResource {
    ApiResource::erase::<pseudoflow_crd::PseudoFlow>(&())
}

fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

async fn reconcile_flow(
    flow: &DynamicObject,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Action, Error> {
    let deleting = flow.metadata.deletion_timestamp.is_some();
    let binding = finalizer::has(flow, BIND_FINALIZER);
    if deleting && let_go(ctx, flow, binding, ns, name).await? {
        return Ok(Action::await_change());
    }
    let f = FlowReconcile::new(flow, ctx, ns, name);
    // 1. Compile: an invalid spec fails before anything runs.
    let Some(compiled) = f.compile().await? else {
        return Ok(Action::await_change());
    };
    if deleting && finalizer::foreground_pending(flow) {
        // The garbage collector is deleting the flow's dependents (a foreground deletion, Argo
        // CD's prune): onDelete's Jobs start once it is done, or it would delete them too. The
        // run state survives it (its Secret holds our finalizer); its end is a flow update.
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    if compiled.spec.bind.is_some() || binding {
        // A flow bound to a kind runs nothing itself: it keeps a flow per object.
        return crate::bind::reconcile_parent(&f.r, &f.flows, &compiled.spec, &f.previous).await;
    }
    // 2. Load the stored run.
    let Some((stored, rv)) = f.load().await? else {
        return Ok(Action::await_change());
    };
    // What is stored now, to skip writes that would change nothing.
    let stored_json = stored.as_ref().map(|r| serde_json::to_value(r).ok());
    // 3. Select the run to drive; stop the runs it replaces.
    // spec.suspend and spec.schedule decide whether a new run starts (deletion always does).
    let sched = schedule::for_flow(&f.r, &compiled.spec, stored.as_ref(), &f.previous, deleting);
    let (mut run, queued, rv) = match f.select(&compiled, stored, rv, &sched).await? {
        Selected::Drive { run, queued, rv } => (*run, queued, rv),
        Selected::Done(action) => return Ok(action),
    };
    // 4-6. Observe its Jobs, fold their results, advance the walker, launch what it says.
    let (compiled, wake) = f.advance(&mut run).await?;
    // 7. Save the run state and write status. Most wake-ups (a Job's pod started, a status
    // echo) change nothing: no write then.
    if stored_json != Some(serde_json::to_value(&run).ok()) {
        save(flow, ctx, &run, rv.as_deref()).await?;
    }
    let plan = plan_of(&compiled, deleting);
    let status = f
        .write_status(plan, &run, queued.as_deref(), &sched)
        .await?;
    if !deleting {
        // A flow made for a bound object writes that object's status (docs/bound-flows.md).
        crate::bind::write_back(&f.r, &compiled.spec, &status, &run.vars).await;
    }
    f.measure(plan, &run);
    if deleting && run.state.phase == RunPhase::Succeeded {
        finalizer::remove(&f.flows, flow).await?;
    }
    let wake = earliest(wake, sched.next);
    Ok(match wake {
        None if queued.is_some() => Action::requeue(Duration::from_secs(5)),
        wake => requeue_at(wake, f.r.now),
    })
}

/// Whether a deleted flow has nothing left to run (no finalizer of ours holds it); if so, its
/// run-state sequence is forgotten. The flow as the API has it now decides, not the watch's
/// copy: right after this controller removed its finalizer, the copy may still show it, and the
/// garbage collector may already have deleted the run state, so a reconcile of the copy would
/// start the onDelete run again (the chaos suite saw its Job created twice). One read per
/// reconcile of a flow being deleted.
async fn let_go(
    ctx: &Context,
    flow: &DynamicObject,
    binding: bool,
    ns: &str,
    name: &str,
) -> Result<bool, Error> {
    let uid = flow.metadata.uid.as_deref().unwrap_or_default();
    let mut gone = !finalizer::present(flow) && !binding;
    if !gone {
        let flows: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), ns, &flow_resource());
        gone = match flows.get_opt(name).await? {
            Some(now) if now.metadata.uid.as_deref() == Some(uid) => {
                !finalizer::present(&now) && !finalizer::has(&now, BIND_FINALIZER)
            }
            _ => true,
        };
    }
    if gone {
        ctx.sequences.forget(uid);
    }
    Ok(gone)
}

/// One reconcile of one flow: who it is, and what it read of the flow object.
struct FlowReconcile<'a> {
    r: Reconciling<'a>,
    flows: Api<DynamicObject>,
    generation: i64,
    /// The status as the flow object shows it.
    previous: Value,
    raw_spec: Value,
    /// Whether the flow is being deleted (its onDelete steps are the plan then).
    deleting: bool,
}

/// What selecting the run decided.
enum Selected {
    /// Drive `run` (the resourceVersion of the stored run state is `rv`); `queued` waits.
    Drive {
        run: Box<StoredRun>,
        queued: Option<String>,
        rv: Option<String>,
    },
    /// Nothing to drive now: the reconcile ends with this.
    Done(Action),
}

impl<'a> FlowReconcile<'a> {
    /// What one reconcile of `flow` (`ns/name`) knows of it before reading anything else.
    fn new(flow: &'a DynamicObject, ctx: &'a Context, ns: &'a str, name: &'a str) -> Self {
        FlowReconcile {
            r: Reconciling {
                ctx,
                flow,
                flow_id: FlowId {
                    name,
                    namespace: Some(ns),
                },
                uid: flow.metadata.uid.as_deref().unwrap_or_default(),
                now: now(),
                publishing: Default::default(),
            },
            flows: Api::namespaced_with(ctx.client.clone(), ns, &flow_resource()),
            generation: flow.metadata.generation.unwrap_or(0),
            previous: flow.data.get("status").cloned().unwrap_or(Value::Null),
            raw_spec: flow.data.get("spec").cloned().unwrap_or(Value::Null),
            deleting: flow.metadata.deletion_timestamp.is_some(),
        }
    }
}

impl FlowReconcile<'_> {
    /// The flow compiled, with its onDelete finalizer set to match; None when the reconcile
    /// ends here (an invalid spec, reported; a deleted flow with no onDelete, let go).
    async fn compile(&self) -> Result<Option<Compiled>, Error> {
        let (r, flow, deleting) = (&self.r, self.r.flow, self.deleting);
        let compiled = match compile(&r.flow_id, &self.raw_spec) {
            Ok(c) => c,
            Err(diags) => {
                outcome::invalid_spec(r, &self.flows, &self.previous, &diags, deleting).await?;
                if deleting && finalizer::has(flow, BIND_FINALIZER) {
                    // A bound flow deleted after an edit broke it still lets its objects go.
                    crate::bind::parent::release(r, &self.flows).await?;
                }
                return Ok(None);
            }
        };
        // onDelete steps hold deletion until they ran; without them nothing should. A bound
        // flow's onDelete is its objects' (each runs in the object's own flow), and a flow
        // made for an object that its bound flow released lets its object be.
        let holds = compiled.on_delete.is_some()
            && compiled.spec.bind.is_none()
            && !crate::bind::released(flow);
        if !deleting && finalizer::present(flow) != holds {
            if holds {
                finalizer::set(&self.flows, flow, true).await?;
            } else {
                // Also releases the run-state Secret the finalizer kept.
                finalizer::remove(&self.flows, flow).await?;
            }
        }
        if deleting && !holds && compiled.spec.bind.is_none() {
            finalizer::remove(&self.flows, flow).await?;
            return Ok(None);
        }
        warnings::publish(r, &self.flows, &compiled, &self.previous).await?;
        Ok(Some(compiled))
    }

    /// The stored run (if any is trusted) and the resourceVersion of its Secret; None when the
    /// reconcile ends here (the run state cannot be read or was not written by the controller,
    /// reported).
    async fn load(&self) -> Result<Option<(Option<StoredRun>, Option<String>)>, Error> {
        let r = &self.r;
        let key = r.ctx.run_state_key.get(&r.ctx.client).await?;
        // What status says was stored last survives a restart; what this process stored or saw
        // may be newer.
        let recorded = self.previous["runStateSequence"].as_u64().unwrap_or(0);
        let floor = r.ctx.sequences.raise(r.uid, recorded);
        let owner = seal::Owner {
            namespace: r.ns(),
            name: r.flow_id.name,
            uid: r.uid,
        };
        Ok(match store::load(&r.ctx.client, key, owner, floor).await? {
            store::Loaded::Nothing => Some((None, None)),
            store::Loaded::Run(run, rv, seq) => {
                r.ctx.sequences.raise(r.uid, seq);
                Some((Some(*run), rv))
            }
            // Nothing in it is trusted: the next save replaces it.
            store::Loaded::NotOurs(rv) => Some((None, Some(rv))),
            store::Loaded::Unreadable(_, why) => {
                outcome::unreadable_run_state(r, &self.flows, &self.previous, &why).await?;
                None
            }
            store::Loaded::Tampered(t) => {
                outcome::tampered_run_state(r, &self.flows, &self.previous, &t).await?;
                None
            }
        })
    }

    /// The run to drive (a new one if the schedule or a spec change wants one), with the runs
    /// it replaces stopped and its secret stored before its first Job.
    async fn select(
        &self,
        compiled: &Compiled,
        stored: Option<StoredRun>,
        rv: Option<String>,
        sched: &schedule::Decision,
    ) -> Result<Selected, Error> {
        let (r, generation, deleting) = (&self.r, self.generation, self.deleting);
        if let Some(note) = sched.missed_note(compiled.spec.starting_deadline_seconds) {
            r.publish(EventType::Warning, "ScheduleMissed", &note).await;
        }
        // A new ops.example.com/retry value replaces the ended run with its retry.
        let stored = retry::apply(r, stored, deleting).await?;
        let wanted = match (sched.start.clone(), &stored) {
            (Some(trigger), _) => {
                let id = wanted_id(r.uid, generation, trigger.as_deref(), deleting);
                let mut run = new_run(&id, generation, trigger, &self.raw_spec, r.now);
                // A retry value already there when a run starts is not a request to retry it.
                run.retry_token = retry::token(r);
                run
            }
            (None, Some(stored)) => stored.clone(),
            (None, None) => {
                let idle = schedule::idle(&compiled.spec, sched, generation);
                outcome::patch_status(&self.flows, r.flow_id.name, status::to_patch(&idle)).await?;
                return Ok(Selected::Done(requeue_at(sched.next, r.now)));
            }
        };
        if let Some(note) = sched.skipped_note() {
            r.publish(EventType::Normal, "ScheduleSkipped", &note).await;
        }
        let policy = compiled.spec.options.concurrency_policy;
        let selection = select(stored, wanted.clone(), policy, deleting);
        for old in &selection.aborted {
            r.abort_run(old).await?;
        }
        let (mut run, queued) = (selection.run, selection.queued);
        // A run is driven with the spec it started with (kept in the run state), so a
        // Forbid-queued spec change waits for the running run to finish as it was. Runs stored
        // before the spec was kept: driven only while the spec is unchanged; otherwise their
        // Jobs finish, then anew.
        if run.spec.is_none() && run.generation != generation {
            return Ok(Selected::Done(
                self.replace_unkept(&run, &wanted, rv, sched).await?,
            ));
        }
        // Every run gets its secret (the root of its journals' signing keys) stored before its
        // first Job exists, so a restarted controller derives the same keys. A new run that
        // launches no Job (every step in the controller) stores it with the rest of its state
        // at the end of this reconcile: one write fewer per run of a bound flow's object.
        let mut rv = rv;
        let no_jobs = run.beside.is_empty()
            && run.spec.as_ref().is_none_or(|s| *s == self.raw_spec)
            && !launches_jobs(plan_of(compiled, deleting));
        if give_secrets(&mut run) && !no_jobs {
            rv = Some(save(r.flow, r.ctx, &run, rv.as_deref()).await?);
        }
        Ok(Selected::Drive {
            run: Box::new(run),
            queued,
            rv,
        })
    }

    /// A run of an older spec that was not kept with it, queued behind: wait for its Jobs, then
    /// start `wanted`.
    async fn replace_unkept(
        &self,
        run: &StoredRun,
        wanted: &StoredRun,
        rv: Option<String>,
        sched: &schedule::Decision,
    ) -> Result<Action, Error> {
        let r = &self.r;
        if r.jobs_running(&run.run_id).await? {
            let queued = status::queued(&wanted.run_id, self.generation);
            outcome::patch_status(&self.flows, r.flow_id.name, status::to_patch(&queued)).await?;
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        if wanted.run_id == run.run_id {
            // No new run is wanted (suspended, or between slots): nothing more to drive.
            return Ok(requeue_at(sched.next, r.now));
        }
        save(r.flow, r.ctx, wanted, rv.as_deref()).await?;
        Ok(Action::requeue(Duration::from_millis(10)))
    }

    /// Drives `run` and the runs beside it (Allow), each with its own spec; a run grown too
    /// large to store ends Failed here; a run that ends here lets older runs' objects go
    /// (`history.rs`). Returns the run's spec compiled and when a timer needs the next look.
    async fn advance(&self, run: &mut StoredRun) -> Result<(Compiled, Option<i64>), Error> {
        let (r, deleting) = (&self.r, self.deleting);
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
        let (ctx, key, uid) = (self.r.ctx, self.r.key(), self.r.uid);
        let active = run.state.phase == RunPhase::Running || !run.beside.is_empty();
        ctx.metrics.set_active(&key, uid, active);
        let seen = timing::steps_seen(plan, run);
        ctx.metrics
            .observe_steps(&key, uid, crate::metrics::unix_now(), seen);
    }

    /// Writes the run's status (with the queued run and the schedule), if it changes anything.
    async fn write_status(
        &self,
        plan: &Plan,
        run: &StoredRun,
        queued: Option<&str>,
        sched: &schedule::Decision,
    ) -> Result<pseudoflow_crd::PseudoFlowStatus, Error> {
        // Whoever sees the phase sees the Events that led to it.
        self.r.told().await;
        let previous = &self.previous;
        let queued = queued.map(|id| (id, self.generation));
        let mut status = status::of_run(previous, plan, run, run.generation, queued, self.r.now);
        schedule::stamp(&mut status, sched);
        let sequence = self.r.ctx.sequences.get(self.r.uid);
        status.run_state_sequence = (sequence > 0).then_some(sequence);
        if run.state.phase == RunPhase::Running && !self.deleting && run::suspended(&self.r) {
            status::held(&mut status);
        }
        let patch = status::replacing(previous, &status);
        if status::without_nulls(&patch) != *previous {
            outcome::patch_status(&self.flows, self.r.flow_id.name, patch).await?;
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

/// Saves `run` as the flow's run state, owned by the flow object, sealed as the next state
/// number after every one stored or seen.
async fn save(
    flow: &DynamicObject,
    ctx: &Context,
    run: &StoredRun,
    rv: Option<&str>,
) -> Result<String, Error> {
    let key = ctx.run_state_key.get(&ctx.client).await?;
    let uid = flow.metadata.uid.as_deref().unwrap_or_default();
    let seq = ctx.sequences.get(uid) + 1;
    let saved = store::save(&ctx.client, key, flow, run, rv, seq).await?;
    // Raised only once stored: a save that failed leaves the floor where the Secret is.
    ctx.sequences.raise(uid, seq);
    Ok(saved)
}
