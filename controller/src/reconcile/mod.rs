//! One reconcile of one flow: compile, load the run state, fold finished Jobs into it, let the
//! walker decide, do controller-local work and launch Jobs, save the state, write status.
//! Level-triggered and restartable: everything it needs is in the API.

mod finalizer;
mod guard;
mod includes;
mod launch;
mod local;
mod observe;
pub mod pod_security;
mod refuse;
mod run;
mod serve;
mod size;
mod status;
pub mod store;

pub use serve::run_controller;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use pseudoflow_compiler::expr::prepare_payload;
use pseudoflow_compiler::expr::{Engine, Scope};
use pseudoflow_compiler::lower::{
    lower, task_of, FlowRef, LowerOptions, NodeInstance, Task, LABEL_RUN,
};
use pseudoflow_compiler::names::{job_name, run_id};
use pseudoflow_compiler::plan::{Plan, PlanNode};
use pseudoflow_compiler::result::IncludedDocument;
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{ConcurrencyPolicy, PseudoFlowSpec, RUN_ANNOTATION};
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::limits::{bounded, MAX_EVENT_NOTE_CHARS, MAX_RUN_STATE_BYTES, MAX_STATUS_MESSAGE_CHARS};
use crate::metrics::Metrics;
use crate::raw::RawFlow;
use crate::walk::{split_instance_id, Action as WalkAction, Completion, Phase, RunPhase, Walker};
use run::{advance_run, earliest};
use store::StoredRun;

/// Shared by all reconciles.
pub struct Context {
    pub client: Client,
    /// The runtime image executor Jobs run.
    pub image: String,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub engine: Engine,
    /// Namespaces whose flows may run node steps (root on nodes), if also labelled
    /// `enforce=privileged`; empty unless set, so node steps fail closed.
    pub node_step_namespaces: pod_security::NodeStepNamespaces,
}

impl Context {
    /// A context reporting Events as `pseudoflow-controller`, allowing node steps nowhere (see
    /// [`Context::with_node_step_namespaces`]).
    pub fn new(client: Client, image: String, metrics: Arc<Metrics>) -> Self {
        let reporter = Reporter {
            controller: "pseudoflow-controller".into(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            image,
            metrics,
            engine: Engine::new(),
            node_step_namespaces: Default::default(),
        }
    }

    /// The same context allowing node steps in `namespaces` (the controller's half of the
    /// opt-in; the namespace must also be labelled `enforce=privileged`).
    pub fn with_node_step_namespaces(
        mut self,
        namespaces: pod_security::NodeStepNamespaces,
    ) -> Self {
        self.node_step_namespaces = namespaces;
        self
    }
}

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}

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
    let ar = flow_resource();
    let flows: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
    let generation = flow.metadata.generation.unwrap_or(0);
    let previous = flow.data.get("status").cloned().unwrap_or(Value::Null);
    let raw_spec = flow.data.get("spec").cloned().unwrap_or(Value::Null);
    let compiled = match compile(
        &FlowId {
            name,
            namespace: Some(ns),
        },
        &raw_spec,
    ) {
        Ok(c) => c,
        Err(diags) => {
            let errors: Vec<String> = diags
                .errors()
                .map(|d| format!("{}: {}", d.path, d.message))
                .collect();
            let message = format!("{} problem(s): {}", errors.len(), errors.join("; "));
            let message = bounded(&message, MAX_STATUS_MESSAGE_CHARS);
            if previous["reason"] != "InvalidSpec"
                || previous["observedGeneration"] != json!(generation)
            {
                publish(ctx, flow, EventType::Warning, "InvalidSpec", &message).await;
                ctx.metrics.run_finished(&format!("{ns}/{name}"), "Failed");
            }
            patch_status(
                &flows,
                name,
                status::invalid(&previous, generation, &message, &status::rfc3339(now())),
            )
            .await?;
            if deleting {
                // Nothing valid to run before deletion: let it go.
                finalizer::remove(&flows, flow).await?;
            }
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
    let trigger = flow.annotations().get(RUN_ANNOTATION).cloned();
    let uid = flow.metadata.uid.as_deref().unwrap_or_default();
    let wanted = if deleting {
        // The onDelete run: its own id, so its Jobs never collide with the last run's.
        format!("d{}", run_id(uid, generation, trigger.as_deref()))
    } else {
        run_id(uid, generation, trigger.as_deref())
    };
    let (stored, leftover_rv) = match store::load(&ctx.client, ns, name, uid).await? {
        store::Loaded::Nothing => (None, None),
        store::Loaded::Run(run, rv) => (Some((*run, rv)), None),
        // Nothing in it is trusted: the next save replaces it.
        store::Loaded::NotOurs(rv) => (None, Some(rv)),
        store::Loaded::Unreadable(_, why) => {
            // Starting afresh would re-run every step on every reconcile.
            let message = format!(
                "the stored state of this flow's run (Secret {}) cannot be read: {why}; delete \
                 that Secret to start a new run",
                store::name(name)
            );
            if previous["reason"] != "RunStateUnreadable" {
                publish(
                    ctx,
                    flow,
                    EventType::Warning,
                    "RunStateUnreadable",
                    &message,
                )
                .await;
            }
            let mut s = previous.clone();
            s["phase"] = json!("Failed");
            s["reason"] = json!("RunStateUnreadable");
            s["message"] = json!(message);
            patch_status(&flows, name, s).await?;
            return Ok(Action::await_change());
        }
    };
    // What is stored now, to skip writes that would change nothing.
    let stored_json = stored.as_ref().map(|(r, _)| serde_json::to_value(r).ok());
    let policy = compiled.spec.options.concurrency_policy;
    let mut queued = None;
    let fresh = || new_run(&wanted, generation, trigger.clone(), &raw_spec);
    let is_wanted = |r: &StoredRun| is_wanted_run(r, &wanted, generation, &trigger, deleting);
    let (mut run, mut rv) = match stored {
        Some((r, rv)) if is_wanted(&r) => (r, rv),
        Some((old, rv)) if deleting => {
            // Deletion stops every running run before the onDelete steps start.
            for r in running_runs(&old) {
                abort_run(ctx, flow, ns, name, &r).await?;
            }
            (fresh(), rv)
        }
        Some((mut old, rv)) if old.state.phase == RunPhase::Running => match policy {
            ConcurrencyPolicy::Forbid => {
                // Keep the running run; the new one waits (status.queuedRun) until it ends.
                queued = Some(wanted.clone());
                (old, rv)
            }
            ConcurrencyPolicy::Replace => {
                for r in running_runs(&old) {
                    abort_run(ctx, flow, ns, name, &r).await?;
                }
                (fresh(), rv)
            }
            ConcurrencyPolicy::Allow => {
                // The running run goes on beside the new one.
                let mut new = fresh();
                new.beside = std::mem::take(&mut old.beside);
                new.beside.push(old);
                (new, rv)
            }
        },
        Some((mut old, rv)) => {
            // The last run ended; Allow runs still going beside it keep going.
            let mut new = fresh();
            new.beside = std::mem::take(&mut old.beside);
            (new, rv)
        }
        // A leftover Secret (an earlier flow of this name) is replaced, not reused.
        None => (fresh(), leftover_rv),
    };
    if !is_wanted(&run) && queued.is_none() {
        unreachable!("a new run is always the wanted one");
    }
    // A run is driven with the spec it started with (kept in the run state), so a Forbid-queued
    // spec change waits for the running run to finish as it was. Runs stored before the spec was
    // kept: driven only while the spec is unchanged; otherwise their Jobs finish, then anew.
    let plan_matches = run.spec.is_some() || run.generation == generation;
    let run_spec = run.spec.clone().unwrap_or_else(|| raw_spec.clone());
    let flow_id = FlowId {
        name,
        namespace: Some(ns),
    };
    let t = now();
    if plan_matches {
        let (compiled, wake) =
            advance_run(ctx, flow, &flow_id, &run_spec, &mut run, deleting, t).await?;
        // Allow: earlier runs still running go on beside this one, each with its own spec.
        let mut wake = wake;
        let mut beside = std::mem::take(&mut run.beside);
        for other in &mut beside {
            let spec = other.spec.clone().unwrap_or_else(|| raw_spec.clone());
            let (_, w) = advance_run(ctx, flow, &flow_id, &spec, other, false, t).await?;
            wake = earliest(wake, w);
        }
        beside.retain(|r| r.state.phase == RunPhase::Running);
        run.beside = beside;
        // A run too large to store ends here, Failed, rather than failing every save after.
        if let Some(over) = size::shrink_to_fit(&mut run, MAX_RUN_STATE_BYTES) {
            warn!("{}", over.message);
            size::stop_jobs(&ctx.client, ns, uid, &over.stopped).await?;
            // Counted and told once, as any run's end (the stopped ones were running).
            run::finish_if_done(ctx, flow, &mut run, ns, name, t).await;
            for other in &mut run.beside {
                run::finish_if_done(ctx, flow, other, ns, name, t).await;
            }
            run.beside.retain(|r| r.state.phase == RunPhase::Running);
        }
        let any_beside = !run.beside.is_empty();
        // Most wake-ups (a Job's pod started, a status echo) change nothing: no write then.
        if stored_json != Some(serde_json::to_value(&run).ok()) {
            rv = Some(save(ctx, flow, &run, rv.as_deref()).await?);
        }
        let status = status::of_run(
            &previous,
            plan_of(&compiled, deleting),
            &run,
            run.generation,
            queued.as_deref().map(|id| (id, generation)),
            &status::rfc3339(t),
        );
        if status::without_nulls(&status) != previous {
            patch_status(&flows, name, status).await?;
        }
        ctx.metrics.set_active(
            &format!("{ns}/{name}"),
            run.state.phase == RunPhase::Running || any_beside,
        );
        let _ = rv;
        if deleting && run.state.phase == RunPhase::Succeeded {
            finalizer::remove(&flows, flow).await?;
        }
        return Ok(match wake {
            Some(at) => Action::requeue(Duration::from_secs(
                u64::try_from((at - t).max(1)).unwrap_or(1),
            )),
            None if queued.is_some() => Action::requeue(Duration::from_secs(5)),
            None => Action::await_change(),
        });
    }
    // Queued behind a run of an older spec: wait for its Jobs, then start the new run.
    let running = Api::<Job>::namespaced(ctx.client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_RUN}={}", run.run_id)))
        .await?
        .items
        .iter()
        .any(|j| {
            j.status
                .as_ref()
                .is_none_or(|s| s.completion_time.is_none() && s.failed.unwrap_or(0) == 0)
        });
    if running {
        let mut s = previous.clone();
        s["queuedRun"] = json!({"id": wanted, "generation": generation});
        patch_status(&flows, name, s).await?;
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let fresh = new_run(&wanted, generation, trigger, &raw_spec);
    save(ctx, flow, &fresh, rv.as_deref()).await?;
    Ok(Action::requeue(Duration::from_millis(10)))
}

/// Ids of the runs of `stored` still running: itself and those beside it.
fn running_runs(stored: &StoredRun) -> Vec<String> {
    std::iter::once(stored)
        .chain(&stored.beside)
        .filter(|r| r.state.phase == RunPhase::Running)
        .map(|r| r.run_id.clone())
        .collect()
}

/// The plan a reconcile walks: the flow's steps, or its `onDelete` steps while it is deleted.
fn plan_of(compiled: &pseudoflow_compiler::Compiled, deleting: bool) -> &Plan {
    match (&compiled.on_delete, deleting) {
        (Some(on_delete), true) => on_delete,
        _ => &compiled.plan,
    }
}

/// Whether the stored run (already known to be this flow object's) is the one wanted now: its
/// id says so, or it was started by the same generation and trigger under the id scheme of an
/// older controller (before run ids covered the uid), so that upgrading the controller does not
/// re-run every flow.
fn is_wanted_run(
    stored: &StoredRun,
    wanted: &str,
    generation: i64,
    trigger: &Option<String>,
    deleting: bool,
) -> bool {
    stored.run_id == wanted
        || (stored.generation == generation
            && &stored.trigger == trigger
            && stored.run_id.starts_with('d') == deleting)
}

fn new_run(id: &str, generation: i64, trigger: Option<String>, spec: &Value) -> StoredRun {
    StoredRun {
        run_id: id.to_string(),
        generation,
        trigger,
        spec: Some(spec.clone()),
        started_at: now(),
        ..Default::default()
    }
}

async fn save(
    ctx: &Context,
    flow: &DynamicObject,
    run: &StoredRun,
    rv: Option<&str>,
) -> Result<String, Error> {
    let typed: pseudoflow_crd::PseudoFlow = serde_json::from_value(json!({
        "apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "metadata": {"name": flow.metadata.name, "namespace": flow.metadata.namespace, "uid": flow.metadata.uid},
        "spec": {"steps": []},
    }))
    .map_err(|e| Error::Other(e.to_string()))?;
    Ok(store::save(&ctx.client, &typed, run, rv).await?)
}

async fn patch_status(flows: &Api<DynamicObject>, name: &str, status: Value) -> Result<(), Error> {
    flows
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await?;
    Ok(())
}

async fn publish(ctx: &Context, flow: &DynamicObject, ty: EventType, reason: &str, note: &str) {
    publish_about(ctx, &flow.object_ref(&flow_resource()), ty, reason, note).await
}

/// [`publish`] for a flow known only by its metadata.
async fn publish_to(ctx: &Context, flow: &RawFlow, ty: EventType, reason: &str, note: &str) {
    publish_about(ctx, &flow.object_ref(&()), ty, reason, note).await
}

async fn publish_about(
    ctx: &Context,
    about: &ObjectReference,
    ty: EventType,
    reason: &str,
    note: &str,
) {
    let ev = Event {
        type_: ty,
        reason: reason.into(),
        note: Some(bounded(note, MAX_EVENT_NOTE_CHARS)),
        // The recorder folds Events with the same reason and action into one series that keeps
        // the first note; an action per distinct note keeps every message (identical ones still
        // fold into a counted series).
        action: format!(
            "{reason}-{:016x}",
            pseudoflow_compiler::names::stable_hash(&[note])
        ),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, about).await {
        warn!("event: {e}");
    }
}

/// Deletes every Job of an older run (concurrencyPolicy Replace, deletion).
async fn abort_run(
    ctx: &Context,
    flow: &DynamicObject,
    ns: &str,
    name: &str,
    old: &str,
) -> Result<(), Error> {
    let uid = flow.metadata.uid.as_deref().unwrap_or_default();
    observe::delete_owned_jobs(&ctx.client, ns, uid, &format!("{LABEL_RUN}={old}")).await?;
    ctx.metrics.run_finished(&format!("{ns}/{name}"), "Aborted");
    publish(
        ctx,
        flow,
        EventType::Normal,
        "RunReplaced",
        &format!("run {old} aborted: a new run replaces it"),
    )
    .await;
    Ok(())
}

#[cfg(test)]
mod wanted_run_tests {
    use super::*;

    fn stored(id: &str, generation: i64, trigger: Option<&str>) -> StoredRun {
        new_run(id, generation, trigger.map(String::from), &Value::Null)
    }

    #[test]
    fn a_run_stored_under_an_older_id_scheme_is_adopted_not_restarted() {
        let legacy = stored("r15d9afd2", 3, Some("again"));
        let trigger = Some("again".to_string());
        assert!(is_wanted_run(&legacy, "rabcdef01", 3, &trigger, false));
        assert!(
            !is_wanted_run(&legacy, "rabcdef01", 4, &trigger, false),
            "new generation"
        );
        assert!(
            !is_wanted_run(&legacy, "rabcdef01", 3, &None, false),
            "new trigger"
        );
        assert!(
            !is_wanted_run(&legacy, "drabcdef01", 3, &trigger, true),
            "deletion"
        );
        let on_delete = stored("dr15d9afd2", 3, None);
        assert!(is_wanted_run(&on_delete, "drabcdef01", 3, &None, true));
    }
}
