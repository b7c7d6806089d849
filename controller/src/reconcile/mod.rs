//! One reconcile of one flow, read top to bottom: compile the spec, load the stored run, select
//! the run to drive (concurrencyPolicy, deletion), observe its Jobs and fold their results, let
//! the walker advance and launch what it says, then save the run state and write status.
//! Level-triggered and restartable: everything it needs is in the API.

mod context;
mod error;
pub mod events;
mod finalizer;
mod guard;
mod invalid;
mod launch;
mod narrate;
pub mod node_health;
mod observe;
pub mod pod_security;
mod refuse;
mod report;
mod reports;
mod run;
mod schedule;
mod serve;
mod size;
mod start;
mod status;
pub mod store;
mod timing;

pub use context::Context;
pub use error::Error;
pub use serve::run_controller;

use std::time::Duration;

use events::EventType;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use pseudoflow_compiler::plan::Plan;
use pseudoflow_compiler::{compile, Compiled, FlowId};
use serde_json::Value;
use tracing::warn;

use crate::limits::MAX_RUN_STATE_BYTES;
use crate::walk::fold::earliest;
use crate::walk::select::{select, wanted_id};
use crate::walk::{RunPhase, StoredRun};
use report::patch_status;
use run::{advance_run, finish_if_done, Reconciling};
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
    if deleting && !finalizer::present(flow) {
        return Ok(Action::await_change());
    }
    let flows: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &flow_resource());
    let generation = flow.metadata.generation.unwrap_or(0);
    let previous = flow.data.get("status").cloned().unwrap_or(Value::Null);
    let raw_spec = flow.data.get("spec").cloned().unwrap_or(Value::Null);
    let r = Reconciling {
        ctx,
        flow,
        flow_id: FlowId {
            name,
            namespace: Some(ns),
        },
        uid: flow.metadata.uid.as_deref().unwrap_or_default(),
        now: now(),
    };
    // 1. Compile: an invalid spec fails before anything runs.
    let compiled = match compile(&r.flow_id, &raw_spec) {
        Ok(c) => c,
        Err(diags) => {
            invalid::spec(&r, &flows, &previous, &diags, deleting).await?;
            return Ok(Action::await_change());
        }
    };
    if !deleting && finalizer::present(flow) != compiled.on_delete.is_some() {
        // onDelete steps hold deletion until they ran; without them nothing should.
        finalizer::set(&flows, flow, compiled.on_delete.is_some()).await?;
    }
    if deleting && compiled.on_delete.is_none() {
        finalizer::remove(&flows, flow).await?;
        return Ok(Action::await_change());
    }
    // 2. Load the stored run.
    let (stored, rv) = match store::load(&ctx.client, ns, name, r.uid).await? {
        store::Loaded::Nothing => (None, None),
        store::Loaded::Run(run, rv) => (Some(*run), rv),
        // Nothing in it is trusted: the next save replaces it.
        store::Loaded::NotOurs(rv) => (None, Some(rv)),
        store::Loaded::Unreadable(_, why) => {
            invalid::run_state(&r, &flows, &previous, &why).await?;
            return Ok(Action::await_change());
        }
    };
    // What is stored now, to skip writes that would change nothing.
    let stored_json = stored.as_ref().map(|r| serde_json::to_value(r).ok());
    // 3. Select the run to drive; stop the runs it replaces.
    // spec.suspend and spec.schedule decide whether a new run starts (deletion always does).
    let sched = schedule::for_flow(&r, &compiled.spec, stored.as_ref(), &previous, deleting);
    let wanted = match (sched.start.clone(), &stored) {
        (Some(trigger), _) => {
            let id = wanted_id(r.uid, generation, trigger.as_deref(), deleting);
            new_run(&id, generation, trigger, &raw_spec, r.now)
        }
        (None, Some(stored)) => stored.clone(),
        (None, None) => {
            let idle = schedule::idle(&compiled.spec, &sched, generation);
            patch_status(&flows, name, status::to_patch(&idle)).await?;
            return Ok(requeue_at(sched.next, r.now));
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
    // A run is driven with the spec it started with (kept in the run state), so a Forbid-queued
    // spec change waits for the running run to finish as it was. Runs stored before the spec was
    // kept: driven only while the spec is unchanged; otherwise their Jobs finish, then anew.
    if run.spec.is_none() && run.generation != generation {
        // Queued behind a run of an older spec: wait for its Jobs, then start the new run.
        if r.jobs_running(&run.run_id).await? {
            let queued = status::queued(&wanted.run_id, generation);
            patch_status(&flows, name, status::to_patch(&queued)).await?;
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        if wanted.run_id == run.run_id {
            // No new run is wanted (suspended, or between slots): nothing more to drive.
            return Ok(requeue_at(sched.next, r.now));
        }
        save(flow, ctx, &wanted, rv.as_deref()).await?;
        return Ok(Action::requeue(Duration::from_millis(10)));
    }
    // Every run gets its secret (the root of its journals' signing keys) stored before its
    // first Job exists, so a restarted controller derives the same keys.
    let mut rv = rv;
    if give_secrets(&mut run) {
        rv = Some(save(flow, ctx, &run, rv.as_deref()).await?);
    }
    let run_spec = run.spec.clone().unwrap_or_else(|| raw_spec.clone());
    // 4-6. Observe its Jobs, fold their results, advance the walker, launch what it says.
    let (compiled, mut wake) = advance_run(&r, &run_spec, &mut run, deleting).await?;
    // Allow: earlier runs still running go on beside this one, each with its own spec.
    let mut beside = std::mem::take(&mut run.beside);
    for other in &mut beside {
        let spec = other.spec.clone().unwrap_or_else(|| raw_spec.clone());
        let (_, w) = advance_run(&r, &spec, other, false).await?;
        wake = earliest(wake, w);
    }
    beside.retain(|r| r.state.phase == RunPhase::Running);
    run.beside = beside;
    // A run too large to store ends here, Failed, rather than failing every save after.
    if let Some(over) = size::shrink_to_fit(&mut run, MAX_RUN_STATE_BYTES) {
        warn!("{}", over.message);
        size::stop_jobs(&ctx.client, ns, r.uid, &over.stopped).await?;
        // Counted and told once, as any run's end (the stopped ones were running).
        let plan = plan_of(&compiled, deleting);
        finish_if_done(&r, plan, &mut run).await;
        for other in &mut run.beside {
            finish_if_done(&r, plan, other).await;
        }
        run.beside.retain(|r| r.state.phase == RunPhase::Running);
    }
    // 7. Save the run state and write status. Most wake-ups (a Job's pod started, a status
    // echo) change nothing: no write then.
    if stored_json != Some(serde_json::to_value(&run).ok()) {
        save(flow, ctx, &run, rv.as_deref()).await?;
    }
    let mut status = status::of_run(
        &previous,
        plan_of(&compiled, deleting),
        &run,
        run.generation,
        queued.as_deref().map(|id| (id, generation)),
        r.now,
    );
    schedule::stamp(&mut status, &sched);
    let patch = status::replacing(&previous, &status);
    if status::without_nulls(&patch) != previous {
        patch_status(&flows, name, patch).await?;
    }
    let active = run.state.phase == RunPhase::Running || !run.beside.is_empty();
    ctx.metrics.set_active(&r.key(), r.uid, active);
    // Every step type's duration, to the sub-second; and the steps still running. (Runs beside
    // this one under concurrencyPolicy Allow have specs of their own and are not timed.)
    let seen = timing::steps_seen(plan_of(&compiled, deleting), &run);
    ctx.metrics
        .observe_steps(&r.key(), r.uid, crate::metrics::unix_now(), seen);
    if deleting && run.state.phase == RunPhase::Succeeded {
        finalizer::remove(&flows, flow).await?;
    }
    let wake = earliest(wake, sched.next);
    Ok(match wake {
        None if queued.is_some() => Action::requeue(Duration::from_secs(5)),
        wake => requeue_at(wake, r.now),
    })
}

/// The plan a reconcile walks: the flow's steps, or its `onDelete` steps while it is deleted.
fn plan_of(compiled: &Compiled, deleting: bool) -> &Plan {
    match (&compiled.on_delete, deleting) {
        (Some(on_delete), true) => on_delete,
        _ => &compiled.plan,
    }
}

/// Saves `run` as the flow's run state, owned by the flow object.
async fn save(
    flow: &DynamicObject,
    ctx: &Context,
    run: &StoredRun,
    rv: Option<&str>,
) -> Result<String, Error> {
    Ok(store::save(&ctx.client, flow, run, rv).await?)
}
