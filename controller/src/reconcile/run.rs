//! Driving one run: fold finished Jobs into it, let the walker decide, launch what it says, and
//! report its end. [`advance_run`] is all a reconcile calls per run; the rest is its machinery.

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::events::EventType;
use pseudoflow_compiler::expr::{prepare_payload, Scope};
use pseudoflow_compiler::lower::{lower, task_of, FlowRef, LowerOptions, NodeInstance, Task};
use pseudoflow_compiler::names::job_name;
use pseudoflow_compiler::plan::{Plan, PlanNode};
use pseudoflow_compiler::result::{IncludedDocument, StepResult};
use pseudoflow_compiler::runtime::{includes, local};
use pseudoflow_compiler::{Compiled, FlowId};
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{PseudoFlowSpec, RUN_ANNOTATION};
use serde_json::Value;
use tracing::{info, warn};

use super::report::publish;
use super::status::{said_at, step_at};
use super::{finalizer, launch, observe, plan_of, pod_security, Context, Error};
use crate::walk::fold::{changed_on_same_node, deadline, earliest, merge_var, timed_out_message};
use crate::walk::{
    split_instance_id, Action as WalkAction, Completion, Phase, RunPhase, StoredRun, Walker,
};

/// One reconcile of one flow: what every part of it needs to know.
pub(super) struct Reconciling<'a> {
    pub ctx: &'a Context,
    pub flow: &'a DynamicObject,
    pub flow_id: FlowId<'a>,
    pub uid: &'a str,
    /// The time this reconcile decides at (unix seconds).
    pub now: i64,
}

impl Reconciling<'_> {
    /// The flow's namespace.
    pub fn ns(&self) -> &str {
        self.flow_id.namespace.unwrap_or_default()
    }

    /// `namespace/name`, as metrics name the flow.
    pub fn key(&self) -> String {
        format!("{}/{}", self.ns(), self.flow_id.name)
    }

    /// Publishes an Event about the flow.
    pub async fn publish(&self, ty: EventType, reason: &str, note: &str) {
        publish(self.ctx, self.flow, ty, reason, note).await
    }

    /// Deletes every Job of an older run (concurrencyPolicy Replace, deletion).
    pub async fn abort_run(&self, old: &str) -> Result<(), Error> {
        let selector = crate::labels::run_selector(old);
        observe::delete_owned_jobs(&self.ctx.client, self.ns(), self.uid, &selector).await?;
        self.ctx.metrics.run_finished(&self.key(), "Aborted");
        let note = format!("run {old} aborted: a new run replaces it");
        self.publish(EventType::Normal, "RunReplaced", &note).await;
        Ok(())
    }

    /// Whether a Job of `run_id` is still running (a run of an older spec, waited for).
    pub async fn jobs_running(&self, run_id: &str) -> Result<bool, Error> {
        let selector = crate::labels::run_selector(run_id);
        Ok(Api::<Job>::namespaced(self.ctx.client.clone(), self.ns())
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .iter()
            .any(|j| {
                j.status
                    .as_ref()
                    .is_none_or(|s| s.completion_time.is_none() && s.failed.unwrap_or(0) == 0)
            }))
    }
}

/// One run being driven: its spec and plan, and where its Jobs go.
struct Driving<'a> {
    r: &'a Reconciling<'a>,
    spec: &'a PseudoFlowSpec,
    plan: &'a Plan,
    walker: &'a Walker<'a>,
    flow_ref: &'a FlowRef,
}

/// Observes, times out and drives one run with the spec it started with; returns that spec
/// compiled (with the run's includes) and when a timer needs the next look.
pub(super) async fn advance_run(
    r: &Reconciling<'_>,
    run_spec: &Value,
    run: &mut StoredRun,
    deleting: bool,
) -> Result<(Compiled, Option<i64>), Error> {
    let mut compiled = includes::expand(&r.flow_id, run_spec, &run.includes)?;
    let flow_ref = FlowRef {
        name: r.flow_id.name.to_string(),
        namespace: r.ns().to_string(),
        uid: r.uid.to_string(),
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
        let d = Driving {
            r,
            spec: &compiled.spec,
            plan,
            walker: &walker,
            flow_ref: &flow_ref,
        };
        d.observe_jobs(run).await?;
    }
    if run.includes.len() != fetched {
        // New steps arrived: they are the fetching step's body from now on.
        compiled = includes::expand(&r.flow_id, run_spec, &run.includes)?;
    }
    let plan = plan_of(&compiled, deleting);
    let walker = Walker::new(plan);
    let d = Driving {
        r,
        spec: &compiled.spec,
        plan,
        walker: &walker,
        flow_ref: &flow_ref,
    };
    // options.timeoutSeconds: the whole run; Failed with reason Timeout, running Jobs deleted.
    let timeout = compiled.spec.options.timeout_seconds;
    let deadline = deadline(run, timeout);
    if deadline.is_some_and(|d| r.now >= d) {
        let msg = timed_out_message(timeout.unwrap_or_default());
        let out = walker.time_out(&mut run.state, &msg);
        d.abort(run, &out.actions).await;
    }
    let wake = d.drive(run).await?;
    let wake = earliest(
        wake,
        deadline.filter(|_| run.state.phase == RunPhase::Running),
    );
    finish_if_done(r, plan, run).await;
    Ok((compiled, wake))
}

impl Driving<'_> {
    fn job_of(&self, run: &StoredRun, node: &str, key: &[String], attempt: u32) -> String {
        job_name(&self.flow_ref.name, &run.run_id, node, key, attempt.max(1))
    }

    /// Folds finished Jobs of Running instances into the run.
    async fn observe_jobs(&self, run: &mut StoredRun) -> Result<(), Error> {
        let (ctx, flow_ref, plan) = (self.r.ctx, self.flow_ref, self.plan);
        let running: Vec<(String, Vec<String>, u32)> = run
            .state
            .instances
            .iter()
            .filter(|(_, i)| i.phase == Phase::Running)
            .map(|(id, i)| {
                let (n, k) = split_instance_id(id);
                (n, k, i.attempt)
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
            &flow_ref.uid,
            &run.run_id,
        )
        .await?;
        for (node_id, key, attempt) in running {
            let job_name = self.job_of(run, &node_id, &key, attempt);
            let result = match jobs.get(&job_name) {
                Some(job) => observe::job_result(&ctx.client, &flow_ref.namespace, job).await?,
                // Not in the (cached) list: a step whose Job was deleted (by hand, by a TTL) would
                // wait forever; a consistent read tells a lagging cache from a Job that is gone.
                None if observe::job_is_gone(&ctx.client, &flow_ref.namespace, &job_name)
                    .await? =>
                {
                    Some(StepResult::failed(format!(
                        "its Job {job_name} was deleted before it reported a result"
                    )))
                }
                None => None,
            };
            let Some(mut result) = result else {
                continue;
            };
            if let Some(IncludedDocument::SecretSteps { name, key, sha256 }) = &result.include {
                result = match observe::secret_steps(
                    &ctx.client,
                    &flow_ref.namespace,
                    name,
                    key,
                    sha256,
                )
                .await
                {
                    Ok(steps) => {
                        let mut r = result.clone();
                        r.include = Some(IncludedDocument::Steps {
                            steps,
                            vars: Default::default(),
                        });
                        r
                    }
                    Err(why) => StepResult::failed(why.to_string()),
                };
            }
            let node = plan.node(&node_id).expect("from the plan");
            // A value nested deeper than the bound would make the stored run unreadable.
            let too_deep = result.vars.iter().find_map(|(k, v)| {
                pseudoflow_compiler::expr::check_depth(v, pseudoflow_compiler::expr::MAX_DEPTH)
                    .err()
                    .map(|e| format!("variable {k}: {e}"))
            });
            if let Some(why) = too_deep {
                result = StepResult::failed(why);
            }
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
            let (ty, reason) = if c.ok {
                (EventType::Normal, "StepSucceeded")
            } else {
                (EventType::Warning, "StepFailed")
            };
            let note = said_at(&step_at(&node.path, &key), &c.message);
            self.r.publish(ty, reason, &note).await;
            self.complete(run, &node_id, &key, c).await;
        }
        Ok(())
    }

    /// Tells the walker an instance ended, and stops what that aborts.
    async fn complete(&self, run: &mut StoredRun, node: &str, key: &[String], c: Completion) {
        let out = self
            .walker
            .complete(&mut run.state, node, key, c, self.r.now);
        self.abort(run, &out.actions).await;
    }

    /// Deletes the Jobs of the instances the walker aborted.
    async fn abort(&self, run: &StoredRun, actions: &[WalkAction]) {
        let flow_ref = self.flow_ref;
        for a in actions {
            if let WalkAction::Abort { node, key } = a {
                let attempt = run.state.get(node, key).attempt;
                let name = self.job_of(run, node, key, attempt);
                if let Err(e) = observe::delete_owned_job(
                    &self.r.ctx.client,
                    &flow_ref.namespace,
                    &flow_ref.uid,
                    &name,
                )
                .await
                {
                    warn!(job = %name, "stopping a step's Job: {e}");
                }
            }
        }
    }

    fn scope(&self, run: &StoredRun, node: &PlanNode, key: &[String]) -> Scope {
        let walker = self.walker;
        let mut s: Scope = includes::base_vars(walker.plan(), node, &self.spec.vars, &run.includes)
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        s.extend(run.vars.clone());
        s.extend(walker.loop_vars(node, key, &run.state));
        s
    }

    /// Lets the walker decide and carries its decisions out until only Jobs are left to wait
    /// for. Returns when a timer needs the next look.
    async fn drive(&self, run: &mut StoredRun) -> Result<Option<i64>, Error> {
        let (ctx, plan, walker, flow_ref, t) = (
            self.r.ctx,
            self.plan,
            self.walker,
            self.flow_ref,
            self.r.now,
        );
        let opts = LowerOptions {
            image: ctx.image.clone(),
        };
        // Read once per drive, and only when a node step is about to launch.
        let mut node_pods_refused: Option<Option<String>> = None;
        loop {
            let outcome = walker.advance(&mut run.state, t);
            let mut progressed = false;
            self.abort(run, &outcome.actions).await;
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
                let sc = self.scope(run, node, key);
                if task_of(node).is_none() {
                    let res = local::run(&ctx.engine, node, &sc);
                    if let Some((k, v)) = res.var {
                        run.vars.insert(k, v);
                    }
                    if let Some(text) = res.event {
                        self.r.publish(EventType::Normal, "Log", &text).await;
                    }
                    self.complete(run, node_id, key, res.completion.into())
                        .await;
                    progressed = true;
                    continue;
                }
                let only_if_changed = node
                    .step_kind()
                    .is_some_and(|k| k.params().only_if_changed());
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
                        let refused = pod_security::check(ctx, &flow_ref.namespace).await?;
                        node_pods_refused = Some(refused.map(|r| r.to_string()));
                    }
                    if let Some(Some(why)) = &node_pods_refused {
                        self.complete(run, node_id, key, failed(why)).await;
                        progressed = true;
                        continue;
                    }
                }
                let payload = match prepare_payload(&ctx.engine, node, &sc) {
                    Ok((p, _)) => p,
                    Err(e) => {
                        self.complete(run, node_id, key, failed(&e.to_string()))
                            .await;
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
                    artifacts: &self.spec.artifact_sources(),
                };
                let lowered = lower(&inst, &opts)?;
                let created = match launch::launch(&ctx.client, &flow_ref.uid, &lowered).await? {
                    launch::Launched::Created => true,
                    launch::Launched::Adopted => false,
                    launch::Launched::Refused(why) => {
                        self.complete(run, node_id, key, failed(&why)).await;
                        progressed = true;
                        continue;
                    }
                };
                let job = lowered.job.metadata.name.as_deref().unwrap_or_default();
                if created {
                    let on = target
                        .as_deref()
                        .map(|n| format!(" on {n}"))
                        .unwrap_or_default();
                    let note = format!("{}: started{on} (Job {job})", step_at(&node.path, key));
                    self.r
                        .publish(EventType::Normal, "StepStarted", &note)
                        .await;
                }
                info!(node = %node_id, key = ?key, "launched {job}");
            }
            if !progressed {
                return Ok(outcome.wake_at);
            }
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

/// Counts and tells the end of `run` once: a metric, a `Run<phase>` Event.
pub(super) async fn finish_if_done(r: &Reconciling<'_>, plan: &Plan, run: &mut StoredRun) {
    if run.state.phase == RunPhase::Running || run.reported {
        return;
    }
    run.reported = true;
    run.finished_at = Some(r.now);
    let (status, ty) = match run.state.phase {
        RunPhase::Succeeded => ("Succeeded", EventType::Normal),
        _ => ("Failed", EventType::Warning),
    };
    r.ctx.metrics.run_finished(&r.key(), status);
    let note = run
        .state
        .failure
        .as_ref()
        .map(|f| super::status::failure_message(plan, f))
        .unwrap_or_else(|| format!("run {} succeeded", run.run_id));
    let note = if r.flow.metadata.deletion_timestamp.is_some() && status == "Failed" {
        format!(
            "{note}; the flow is kept until its onDelete steps succeed: fix the cause and change \
             the {RUN_ANNOTATION} annotation to retry, or remove the finalizer {} to delete it anyway",
            finalizer::ON_DELETE
        )
    } else {
        note
    };
    r.publish(ty, &format!("Run{status}"), &note).await;
}
