//! Driving one run: fold finished Jobs into it, let the walker decide, launch what it says, and
//! report its end. [`advance_run`] is all a reconcile calls per run; the rest is its machinery.

use super::status::{said_at, step_at};
use super::*;

/// Observes, times out and drives one run with the spec it started with; returns that spec
/// compiled (with the run's includes) and when a timer needs the next look.
pub(super) async fn advance_run(
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

pub(super) fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
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
        &flow_ref.uid,
        &run.run_id,
    )
    .await?;
    for (node_id, key, attempt, started) in running {
        let job_name = job_of(flow_ref, run, &node_id, &key, attempt);
        let result = match jobs.get(&job_name) {
            Some(job) => observe::job_result(&ctx.client, &flow_ref.namespace, job).await?,
            // Not in the (cached) list: a step whose Job was deleted (by hand, by a TTL) would
            // wait forever; a consistent read tells a lagging cache from a Job that is gone.
            None if observe::job_is_gone(&ctx.client, &flow_ref.namespace, &job_name).await? => {
                Some(pseudoflow_compiler::result::StepResult::failed(format!(
                    "its Job {job_name} was deleted before it reported a result"
                )))
            }
            None => None,
        };
        let Some(mut result) = result else {
            continue;
        };
        if let Some(IncludedDocument::SecretSteps { name, key, sha256 }) = &result.include {
            result =
                match observe::secret_steps(&ctx.client, &flow_ref.namespace, name, key, sha256)
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
                    Err(why) => pseudoflow_compiler::result::StepResult::failed(why),
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
            result = pseudoflow_compiler::result::StepResult::failed(why);
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
            &said_at(&step_at(&node.path, &key), &c.message),
        )
        .await;
        let out = walker.complete(&mut run.state, &node_id, &key, c, t);
        abort(ctx, flow_ref, run, &out.actions).await;
    }
    Ok(())
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
    for a in actions {
        if let WalkAction::Abort { node, key } = a {
            let attempt = run.state.get(node, key).attempt;
            let name = job_of(flow_ref, run, node, key, attempt);
            if let Err(e) =
                observe::delete_owned_job(&ctx.client, &flow_ref.namespace, &flow_ref.uid, &name)
                    .await
            {
                warn!(job = %name, "stopping a step's Job: {e}");
            }
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
            let created = match launch::launch(&ctx.client, &flow_ref.uid, &lowered).await? {
                launch::Launched::Created => true,
                launch::Launched::Adopted => false,
                launch::Launched::Refused(why) => {
                    let out = walker.complete(&mut run.state, node_id, key, failed(&why), t);
                    abort(ctx, flow_ref, run, &out.actions).await;
                    progressed = true;
                    continue;
                }
            };
            if created {
                let job = lowered.job.metadata.name.as_deref().unwrap_or_default();
                let on = target
                    .as_deref()
                    .map(|n| format!(" on {n}"))
                    .unwrap_or_default();
                let note = format!("{}: started{on} (Job {job})", step_at(&node.path, key));
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

pub(super) async fn finish_if_done(
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
