//! One reconcile of one flow: compile, load the run state, fold finished Jobs into it, let the
//! walker decide, do controller-local work and launch Jobs, save the state, write status.
//! Level-triggered and restartable: everything it needs is in the API.

mod finalizer;
mod includes;
mod local;
mod observe;
pub mod pod_security;
mod status;
pub mod store;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::discovery::ApiResource;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use pseudoflow_compiler::expr::{Engine, Scope};
use pseudoflow_compiler::exprs::prepare_payload;
use pseudoflow_compiler::lower::{lower, task_of, FlowRef, LowerOptions, NodeInstance, Task};
use pseudoflow_compiler::names::{job_name, run_id};
use pseudoflow_compiler::plan::{Plan, PlanNode};
use pseudoflow_compiler::result::IncludedDocument;
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{ConcurrencyPolicy, PseudoFlowSpec, StepKind, RUN_ANNOTATION};
use serde_json::{json, Value};
use tracing::{info, info_span, warn, Instrument};

use crate::metrics::Metrics;
use crate::walk::{split_instance_id, Action as WalkAction, Completion, Phase, RunPhase, Walker};
use store::StoredRun;

/// Shared by all reconciles.
pub struct Context {
    pub client: Client,
    /// The runtime image executor Jobs run.
    pub image: String,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub engine: Engine,
}

impl Context {
    /// A context reporting Events as `pseudoflow-controller`.
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
        }
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

/// Runs the controller until the process is told to stop; `namespace` limits it to one.
pub async fn run_controller(ctx: Arc<Context>, namespace: Option<String>) {
    let ar = flow_resource();
    let (flows, jobs): (Api<DynamicObject>, Api<Job>) = match &namespace {
        Some(ns) => (
            Api::namespaced_with(ctx.client.clone(), ns, &ar),
            Api::namespaced(ctx.client.clone(), ns),
        ),
        None => (
            Api::all_with(ctx.client.clone(), &ar),
            Api::all(ctx.client.clone()),
        ),
    };
    Controller::new_with(flows, watcher::Config::default(), ar)
        .owns(
            jobs,
            watcher::Config::default().labels("app.kubernetes.io/managed-by=pseudoflow"),
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                warn!("reconcile: {e}");
            }
        })
        .await;
}

fn error_policy(_flow: Arc<DynamicObject>, err: &Error, _ctx: Arc<Context>) -> Action {
    warn!("reconcile failed, retrying: {err}");
    Action::requeue(Duration::from_secs(2))
}

fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

async fn reconcile(flow: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = flow.namespace().unwrap_or_default();
    let name = flow.name_any();
    let span = info_span!("flow", flow = %format!("{ns}/{name}"));
    reconcile_flow(&flow, &ctx, &ns, &name)
        .instrument(span)
        .await
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
            let message: String = message.chars().take(2000).collect();
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
    let wanted = if deleting {
        // The onDelete run: its own id, so its Jobs never collide with the last run's.
        format!("d{}", run_id(generation, trigger.as_deref()))
    } else {
        run_id(generation, trigger.as_deref())
    };
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let stored = store::load(&cms, name).await?;
    // What is stored now, to skip writes that would change nothing.
    let stored_json = stored.as_ref().map(|(r, _)| serde_json::to_value(r).ok());
    let policy = compiled.spec.options.concurrency_policy;
    let mut queued = None;
    let fresh = || new_run(&wanted, generation, trigger.clone(), &raw_spec);
    let (mut run, mut rv) = match stored {
        Some((r, rv)) if r.run_id == wanted => (r, Some(rv)),
        Some((old, rv)) if deleting => {
            // Deletion stops every running run before the onDelete steps start.
            for r in running_runs(&old) {
                abort_run(ctx, flow, ns, name, &r).await?;
            }
            (fresh(), Some(rv))
        }
        Some((mut old, rv)) if old.state.phase == RunPhase::Running => match policy {
            ConcurrencyPolicy::Forbid => {
                // Keep the running run; the new one waits (status.queuedRun) until it ends.
                queued = Some(wanted.clone());
                (old, Some(rv))
            }
            ConcurrencyPolicy::Replace => {
                for r in running_runs(&old) {
                    abort_run(ctx, flow, ns, name, &r).await?;
                }
                (fresh(), Some(rv))
            }
            ConcurrencyPolicy::Allow => {
                // The running run goes on beside the new one.
                let mut new = fresh();
                new.beside = std::mem::take(&mut old.beside);
                new.beside.push(old);
                (new, Some(rv))
            }
        },
        Some((mut old, rv)) => {
            // The last run ended; Allow runs still going beside it keep going.
            let mut new = fresh();
            new.beside = std::mem::take(&mut old.beside);
            (new, Some(rv))
        }
        None => (fresh(), None),
    };
    if run.run_id != wanted && queued.is_none() {
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
        let any_beside = !beside.is_empty();
        run.beside = beside;
        // Most wake-ups (a Job's pod started, a status echo) change nothing: no write then.
        if stored_json != Some(serde_json::to_value(&run).ok()) {
            rv = Some(save(&cms, flow, &run, rv.as_deref()).await?);
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
        .list(&ListParams::default().labels(&format!("ops.example.com/run={}", run.run_id)))
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
    save(&cms, flow, &fresh, rv.as_deref()).await?;
    Ok(Action::requeue(Duration::from_millis(10)))
}

/// Observes, times out and drives one run with the spec it started with; returns that spec
/// compiled (with the run's includes) and when a timer needs the next look.
async fn advance_run(
    ctx: &Context,
    flow: &DynamicObject,
    flow_id: &FlowId<'_>,
    run_spec: &Value,
    run: &mut StoredRun,
    deleting: bool,
    t: i64,
) -> Result<(pseudoflow_compiler::Compiled, Option<i64>), Error> {
    let (ns, name) = (flow_id.namespace.unwrap_or_default(), flow_id.name);
    let mut compiled = includes::expand(flow_id, run_spec, &run.includes).map_err(Error::Other)?;
    let flow_ref = FlowRef {
        name: name.to_string(),
        namespace: ns.to_string(),
        uid: flow.metadata.uid.clone().unwrap_or_default(),
        service_account: compiled
            .spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into()),
    };
    let fetched = run.includes.len();
    {
        let plan = plan_of(&compiled, deleting);
        let walker = Walker::new(plan);
        observe_jobs(ctx, flow, plan, &walker, run, &flow_ref, t).await?;
    }
    if run.includes.len() != fetched {
        // New steps arrived: they are the fetching step's body from now on.
        compiled = includes::expand(flow_id, run_spec, &run.includes).map_err(Error::Other)?;
    }
    let plan = plan_of(&compiled, deleting);
    let walker = Walker::new(plan);
    // options.timeoutSeconds: the whole run; Failed with reason Timeout, running Jobs deleted.
    let deadline = compiled
        .spec
        .options
        .timeout_seconds
        .map(|s| run.started_at + i64::from(s));
    if deadline.is_some_and(|d| t >= d) {
        let secs = compiled.spec.options.timeout_seconds.unwrap_or_default();
        let msg = format!(
            "the run took longer than options.timeoutSeconds ({secs}s); running steps were stopped"
        );
        let out = walker.time_out(&mut run.state, &msg);
        abort(ctx, &flow_ref, run, &out.actions).await;
    }
    let wake = drive(ctx, flow, &compiled.spec, plan, &walker, run, &flow_ref, t).await?;
    let wake = earliest(
        wake,
        deadline.filter(|_| run.state.phase == RunPhase::Running),
    );
    finish_if_done(ctx, flow, run, ns, name, t).await;
    Ok((compiled, wake))
}

fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
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
    cms: &Api<ConfigMap>,
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
    Ok(store::save(cms, &typed, run, rv).await?)
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
    let ev = Event {
        type_: ty,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        // The recorder folds Events with the same reason and action into one series that keeps
        // the first note; an action per distinct note keeps every message (identical ones still
        // fold into a counted series).
        action: format!(
            "{reason}-{:016x}",
            pseudoflow_compiler::names::stable_hash(&[note])
        ),
        secondary: None,
    };
    if let Err(e) = ctx
        .recorder
        .publish(&ev, &flow.object_ref(&flow_resource()))
        .await
    {
        warn!("event: {e}");
    }
}

/// Deletes every Job of an older run (concurrencyPolicy Replace).
async fn abort_run(
    ctx: &Context,
    flow: &DynamicObject,
    ns: &str,
    name: &str,
    old: &str,
) -> Result<(), Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    jobs.delete_collection(
        &dp,
        &ListParams::default().labels(&format!("ops.example.com/run={old}")),
    )
    .await?;
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

fn job_of(flow: &FlowRef, run: &StoredRun, node: &str, key: &[String], attempt: u32) -> String {
    job_name(&flow.name, &run.run_id, node, key, attempt.max(1))
}

/// Folds finished Jobs of Running instances into the run.
async fn observe_jobs(
    ctx: &Context,
    flow: &DynamicObject,
    plan: &Plan,
    walker: &Walker<'_>,
    run: &mut StoredRun,
    flow_ref: &FlowRef,
    t: i64,
) -> Result<(), Error> {
    let running: Vec<(String, Vec<String>, u32, Option<i64>)> = run
        .state
        .instances
        .iter()
        .filter(|(_, i)| i.phase == Phase::Running)
        .map(|(id, i)| {
            let (n, k) = split_instance_id(id);
            (n, k, i.attempt, i.started_at)
        })
        .filter(|(n, ..)| plan.node(n).and_then(task_of).is_some())
        .collect();
    if running.is_empty() {
        return Ok(());
    }
    let jobs = observe::run_jobs(
        &ctx.client,
        &flow_ref.namespace,
        &flow_ref.name,
        &run.run_id,
    )
    .await?;
    for (node_id, key, attempt, started) in running {
        let Some(job) = jobs.get(&job_of(flow_ref, run, &node_id, &key, attempt)) else {
            continue;
        };
        let Some(result) = observe::job_result(&ctx.client, &flow_ref.namespace, job).await? else {
            continue;
        };
        let node = plan.node(&node_id).expect("from the plan");
        for (k, v) in &result.vars {
            merge_var(&mut run.vars, k, v.clone());
        }
        let items = result.nodes.clone().map(|names| {
            names
                .into_iter()
                .map(|n| (n.clone(), Value::String(n)))
                .collect()
        });
        let mut c = Completion {
            ok: result.ok,
            changed: result.changed,
            message: result.message.clone(),
            condition: result.condition,
            items,
        };
        if let (true, Some(IncludedDocument::Steps { steps, vars })) = (c.ok, &result.include) {
            let fetched = includes::Included {
                steps: steps.clone(),
                vars: vars.clone(),
            };
            let root = format!("{}/{}", flow_ref.namespace, flow_ref.name);
            if let Err(e) = includes::accept(plan, &root, node, fetched, &mut run.includes) {
                c.ok = false;
                c.message = e.to_string();
            }
        }
        ctx.metrics.step_finished(
            &format!("{}/{}", flow_ref.namespace, flow_ref.name),
            &node.step_type,
            (t - started.unwrap_or(t)) as f64,
        );
        let (ty, reason) = if c.ok {
            (EventType::Normal, "StepSucceeded")
        } else {
            (EventType::Warning, "StepFailed")
        };
        publish(
            ctx,
            flow,
            ty,
            reason,
            &format!("{}{}: {}", node.path, key_suffix(&key), c.message),
        )
        .await;
        let out = walker.complete(&mut run.state, &node_id, &key, c, t);
        abort(ctx, flow_ref, run, &out.actions).await;
    }
    Ok(())
}

fn key_suffix(key: &[String]) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!(" [{}]", key.join("/"))
    }
}

/// `varPerNode` maps from several nodes merge; anything else is replaced.
fn merge_var(vars: &mut BTreeMap<String, Value>, k: &str, v: Value) {
    match (vars.get_mut(k), v) {
        (Some(Value::Object(existing)), Value::Object(new)) => existing.extend(new),
        (_, v) => {
            vars.insert(k.to_string(), v);
        }
    }
}

async fn abort(ctx: &Context, flow_ref: &FlowRef, run: &StoredRun, actions: &[WalkAction]) {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &flow_ref.namespace);
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    for a in actions {
        if let WalkAction::Abort { node, key } = a {
            let attempt = run.state.get(node, key).attempt;
            let _ = jobs
                .delete(&job_of(flow_ref, run, node, key, attempt), &dp)
                .await;
        }
    }
}

fn scope(
    spec: &PseudoFlowSpec,
    run: &StoredRun,
    walker: &Walker<'_>,
    node: &PlanNode,
    key: &[String],
) -> Scope {
    let mut s: Scope = includes::base_vars(walker.plan(), node, &spec.vars, &run.includes)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    s.extend(run.vars.clone());
    s.extend(walker.loop_vars(node, key, &run.state));
    s
}

/// `onlyIfChanged`: did an earlier step for this node instance's node change anything this run?
fn changed_on_same_node(run: &StoredRun, key: &[String]) -> bool {
    let Some(node_name) = key.last() else {
        return false;
    };
    run.state
        .instances
        .iter()
        .any(|(id, i)| i.changed && split_instance_id(id).1.last() == Some(node_name))
}

/// Lets the walker decide and carries its decisions out until only Jobs are left to wait for.
/// Returns when a timer needs the next look.
#[allow(clippy::too_many_arguments)]
async fn drive(
    ctx: &Context,
    flow: &DynamicObject,
    spec: &PseudoFlowSpec,
    plan: &Plan,
    walker: &Walker<'_>,
    run: &mut StoredRun,
    flow_ref: &FlowRef,
    t: i64,
) -> Result<Option<i64>, Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &flow_ref.namespace);
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &flow_ref.namespace);
    let opts = LowerOptions {
        image: ctx.image.clone(),
    };
    // Read once per drive, and only when a node step is about to launch.
    let mut node_pods_refused: Option<Option<String>> = None;
    loop {
        let outcome = walker.advance(&mut run.state, t);
        let mut progressed = false;
        abort(ctx, flow_ref, run, &outcome.actions).await;
        for action in &outcome.actions {
            let WalkAction::Start {
                node: node_id,
                key,
                attempt,
            } = action
            else {
                continue;
            };
            let node = plan.node(node_id).expect("from the plan");
            let sc = scope(spec, run, walker, node, key);
            if task_of(node).is_none() {
                let res = local::run(&ctx.engine, node, &sc);
                if let Some((k, v)) = res.var {
                    run.vars.insert(k, v);
                }
                if let Some(text) = res.event {
                    publish(ctx, flow, EventType::Normal, "Log", &text).await;
                }
                let out = walker.complete(&mut run.state, node_id, key, res.completion, t);
                abort(ctx, flow_ref, run, &out.actions).await;
                progressed = true;
                continue;
            }
            let only_if_changed = matches!(node.step.as_ref().map(|s| &s.kind), Some(StepKind::ExecNode(e)) if e.only_if_changed)
                || matches!(node.step.as_ref().map(|s| &s.kind), Some(StepKind::Script(s)) if s.only_if_changed);
            if only_if_changed && !changed_on_same_node(run, key) {
                let c = Completion {
                    ok: true,
                    message: "skipped: nothing changed on this node".into(),
                    ..Default::default()
                };
                walker.complete(&mut run.state, node_id, key, c, t);
                progressed = true;
                continue;
            }
            if node.placement == Placement::Node && task_of(node) == Some(Task::Run) {
                if node_pods_refused.is_none() {
                    node_pods_refused =
                        Some(pod_security::check(&ctx.client, &flow_ref.namespace).await?);
                }
                if let Some(Some(why)) = &node_pods_refused {
                    let out = walker.complete(&mut run.state, node_id, key, failed(why), t);
                    abort(ctx, flow_ref, run, &out.actions).await;
                    progressed = true;
                    continue;
                }
            }
            let payload = match prepare_payload(&ctx.engine, node, &sc) {
                Ok((p, _)) => p,
                Err(e) => {
                    let out =
                        walker.complete(&mut run.state, node_id, key, failed(&e.to_string()), t);
                    abort(ctx, flow_ref, run, &out.actions).await;
                    progressed = true;
                    continue;
                }
            };
            let target = sc.get("node").and_then(Value::as_str).map(str::to_string);
            let inst = NodeInstance {
                flow: flow_ref,
                run_id: &run.run_id,
                node,
                instance: key,
                attempt: *attempt,
                step: payload,
                target_node: target.as_deref(),
                artifacts: &spec.artifact_sources(),
            };
            let lowered = lower(&inst, &opts).map_err(|e| Error::Other(e.to_string()))?;
            let mut created = false;
            for r in [
                cms.create(&PostParams::default(), &lowered.config_map)
                    .await
                    .map(|_| ()),
                jobs.create(&PostParams::default(), &lowered.job)
                    .await
                    .map(|_| ()),
            ] {
                match r {
                    Ok(()) => created = true,
                    // Deterministic names: it was created by an earlier reconcile.
                    Err(kube::Error::Api(e)) if e.code == 409 => created = false,
                    Err(e) => return Err(e.into()),
                }
            }
            if created {
                let job = lowered.job.metadata.name.as_deref().unwrap_or_default();
                let on = target
                    .as_deref()
                    .map(|n| format!(" on {n}"))
                    .unwrap_or_default();
                let note = format!("{}{}: started{on} (Job {job})", node.path, key_suffix(key));
                publish(ctx, flow, EventType::Normal, "StepStarted", &note).await;
            }
            info!(node = %node_id, key = ?key, "launched {}", lowered.job.metadata.name.as_deref().unwrap_or_default());
        }
        if !progressed {
            return Ok(outcome.wake_at);
        }
    }
}

fn failed(message: &str) -> Completion {
    Completion {
        ok: false,
        message: message.to_string(),
        ..Default::default()
    }
}

async fn finish_if_done(
    ctx: &Context,
    flow: &DynamicObject,
    run: &mut StoredRun,
    ns: &str,
    name: &str,
    t: i64,
) {
    if run.state.phase == RunPhase::Running || run.reported {
        return;
    }
    run.reported = true;
    run.finished_at = Some(t);
    let (status, ty) = match run.state.phase {
        RunPhase::Succeeded => ("Succeeded", EventType::Normal),
        _ => ("Failed", EventType::Warning),
    };
    ctx.metrics.run_finished(&format!("{ns}/{name}"), status);
    let note = run
        .state
        .failure
        .as_ref()
        .map(|(id, m)| format!("{id}: {m}"))
        .unwrap_or_else(|| format!("run {} succeeded", run.run_id));
    let note = if flow.metadata.deletion_timestamp.is_some() && status == "Failed" {
        format!(
            "{note}; the flow is kept until its onDelete steps succeed: fix the cause and change \
             the {RUN_ANNOTATION} annotation to retry, or remove the finalizer {} to delete it anyway",
            finalizer::ON_DELETE
        )
    } else {
        note
    };
    publish(ctx, flow, ty, &format!("Run{status}"), &note).await;
}
