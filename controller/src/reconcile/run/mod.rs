//! Driving one run: fold finished Jobs into it, let the walker decide, launch what it says, and
//! report its end. [`advance_run`] is all a reconcile calls per run; the rest is its machinery.

use crate::flow::events::EventType;
use pseudoflow_compiler::expr::{prepare_payload, Scope};
use pseudoflow_compiler::lower::{lower, task_of, FlowRef, LowerOptions, NodeInstance, Task};
use pseudoflow_compiler::plan::{Plan, PlanNode};
use pseudoflow_compiler::{fuse, Compiled};
use pseudoflow_crd::protocol::result::{IncludedDocument, StepResult};
use pseudoflow_crd::status::ApprovalRecord;
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{FlowPhase, PseudoFlowSpec, StepKind, RUN_ANNOTATION};
use pseudoflow_walk::{includes, local};
use serde_json::Value;
use tracing::{info, warn};

use super::job_reports::{self as reports, Reports};
use super::narrate::Narrator;
use super::{launch, observe, on_delete, plan_of, pod_security, Reconcile};
use crate::approval;
use crate::drive::{failed, Driver};
use crate::flow::status::{said_at, step_at};
use crate::flow::Error;
use pseudoflow_walk::fold::{
    changed_on_same_node, deadline, earliest, merge_var, timed_out_message,
};
use pseudoflow_walk::{
    split_instance_id, Action as WalkAction, Completion, Instance, Phase, RunPhase, StoredRun,
    Walker,
};

mod in_controller;

/// How long a node step waits, at most, for the controller's Node watch to first answer.
const NODE_WATCH_SETTLES: std::time::Duration = std::time::Duration::from_secs(10);

/// One run being driven: its spec and plan, and where its Jobs go.
struct Driving<'a> {
    r: &'a Reconcile<'a>,
    spec: &'a PseudoFlowSpec,
    plan: &'a Plan,
    walker: &'a Walker<'a>,
    flow_ref: &'a FlowRef,
    /// What the run's Jobs reported, looked up once per reconcile.
    reports: &'a Reports,
    /// Tells of every step this reconcile moved that no Event named yet.
    narrator: &'a Narrator,
}

/// Observes, times out and drives one run with the spec it started with; returns that spec
/// compiled (with the run's includes) and when a timer needs the next look.
pub(super) async fn advance_run(
    r: &Reconcile<'_>,
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
    let reports = Reports::default();
    let narrator = Narrator::before(run);
    {
        let plan = plan_of(&compiled, deleting);
        let walker = Walker::new(plan);
        let d = Driving {
            r,
            spec: &compiled.spec,
            plan,
            walker: &walker,
            flow_ref: &flow_ref,
            reports: &reports,
            narrator: &narrator,
        };
        d.observe_jobs(run).await?;
    }
    if run.includes.len() != fetched {
        // New steps arrived: they are the fetching step's body from now on.
        compiled = includes::expand(&r.flow_id, run_spec, &run.includes)?;
    }
    let plan = plan_of(&compiled, deleting);
    // spec.suspend holds a running run: what runs finishes, nothing new starts (deletion's
    // onDelete run is never held).
    let walker = Walker::new(plan).holding(!deleting && suspended(r));
    let d = Driving {
        r,
        spec: &compiled.spec,
        plan,
        walker: &walker,
        flow_ref: &flow_ref,
        reports: &reports,
        narrator: &narrator,
    };
    // options.timeoutSeconds: the whole run; Failed with reason Timeout, running Jobs deleted.
    let timeout = compiled.spec.options.timeout_seconds;
    let deadline = deadline(run, timeout);
    if deadline.is_some_and(|d| r.now >= d) {
        let msg = timed_out_message(timeout.unwrap_or_default());
        let out = walker.time_out(&mut run.state, &msg);
        d.abort(run, &out.actions).await;
    }
    // ops.example.com/stop naming this run: Aborted, running Jobs deleted, nothing more starts.
    if super::stop::requested(r, run, deleting) {
        let message = super::stop::message(r, run);
        let out = walker.stop(&mut run.state, &message);
        d.abort(run, &out.actions).await;
    }
    let wake = d.drive(run).await?;
    let wake = earliest(
        wake,
        deadline.filter(|_| run.state.phase == RunPhase::Running),
    );
    narrator.tell(r, plan, run).await;
    finish_if_done(r, plan, run).await;
    Ok((compiled, wake))
}

/// Whether the flow, as it is now (not as its run started), says `spec.suspend: true`.
pub(super) fn suspended(r: &Reconcile<'_>) -> bool {
    r.flow.data["spec"]["suspend"] == Value::Bool(true)
}

impl Driving<'_> {
    fn job_of(&self, run: &StoredRun, node: &str, key: &[String], attempt: u32) -> String {
        self.driver().job_name(run, node, key, attempt)
    }

    /// The secret a fused Job's journal key derives from (None: no journal is trusted).
    fn journal_secret<'r>(&self, run: &'r StoredRun) -> Option<&'r str> {
        (!run.secret.is_empty()).then_some(run.secret.as_str())
    }

    /// Folds what the Jobs of Running instances reported into the run: a Job's result when it
    /// ended, and each step of a fused segment as soon as its journal records it.
    async fn observe_jobs(&self, run: &mut StoredRun) -> Result<(), Error> {
        let (ctx, flow_ref, plan) = (self.r.ctx, self.flow_ref, self.plan);
        let running: Vec<(String, Vec<String>, Instance)> = run
            .state
            .instances
            .iter()
            .filter(|(_, i)| i.phase == Phase::Running)
            .map(|(id, i)| {
                let (n, k) = split_instance_id(id);
                (n, k, i.clone())
            })
            .filter(|(n, ..)| {
                plan.node(n)
                    .is_some_and(|n| task_of(n).is_some() || n.segment.is_some())
            })
            .collect();
        // Steps the controller runs itself: folded when they ended, started again when this
        // controller does not know them (it restarted); no Job to read.
        let (mine, running): (Vec<_>, Vec<_>) = running
            .into_iter()
            .partition(|(n, ..)| plan.node(n).is_some_and(|n| n.in_controller.is_some()));
        for (node_id, key, inst) in mine {
            let node = plan.node(&node_id).expect("from the plan");
            self.run_in_controller(run, node, &key, inst.attempt)
                .await?;
        }
        if running.is_empty() {
            self.r
                .own
                .nodes
                .track(&flow_ref.namespace, &flow_ref.name, std::iter::empty());
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
        // So that a node which stops reporting wakes this flow (see `NodeHealth`).
        self.r
            .own
            .nodes
            .track(&flow_ref.namespace, &flow_ref.name, jobs.values());
        for (node_id, key, inst) in running {
            let node = plan.node(&node_id).expect("from the plan");
            let job_node = inst.job_node.as_deref().unwrap_or(&node_id);
            let job_name = self.job_of(run, job_node, &key, inst.attempt);
            let secret = self.journal_secret(run);
            let journal = secret.filter(|_| node.segment.is_some());
            let report = self
                .reports
                .of(
                    &ctx.client,
                    &self.r.own.nodes,
                    &flow_ref.namespace,
                    &jobs,
                    &job_name,
                    (journal, secret),
                )
                .await?;
            if let Some((result, times)) = reports::outcome_of(&report, node, &job_name) {
                self.fold(run, &node_id, &key, result, times).await;
            }
        }
        Ok(())
    }

    /// Folds one step's result into the run: its variables, included steps, Event, metric,
    /// and the walker's decision.
    async fn fold(
        &self,
        run: &mut StoredRun,
        node_id: &str,
        key: &[String],
        result: StepResult,
        times: Option<(i64, i64)>,
    ) {
        let from_secret = matches!(result.include, Some(IncludedDocument::SecretSteps { .. }));
        let result = self.with_secret_steps(result).await;
        let node = self.plan.node(node_id).expect("from the plan");
        let result = crate::redact::failure(run, bounded_in_depth(result));
        for (k, v) in &result.vars {
            merge_var(&mut run.vars, k, v.clone());
        }
        let c = self.completion_of(run, node, &result, from_secret);
        if c.ok && matches!(node.step_kind(), Some(StepKind::Log(_))) {
            // A `log` fused into a segment: its Event, as the controller publishes it for
            // an unfused one.
            self.r
                .publish(EventType::Normal, "Log", &result.message)
                .await;
        }
        let (ty, reason) = if c.ok {
            (EventType::Normal, "StepSucceeded")
        } else {
            (EventType::Warning, "StepFailed")
        };
        let note = said_at(&step_at(&node.path, key), &c.message);
        self.r.publish(ty, reason, &note).await;
        self.narrator.told(node_id, key);
        self.complete(run, node_id, key, c).await;
        if let Some((from, to)) = times {
            let inst = run.state.entry(node_id, key);
            inst.started_at = Some(from / 1000);
            if inst.phase.settled() {
                inst.finished_at = Some(to / 1000);
                inst.took_ms = Some(to.saturating_sub(from) as u64);
            }
        }
    }

    /// `result` with the steps an include read from a Secret in place of the Secret's name
    /// (re-read here and checked against the digest the Job reported), or failed if they
    /// cannot be.
    async fn with_secret_steps(&self, result: StepResult) -> StepResult {
        let Some(IncludedDocument::SecretSteps { name, key, sha256 }) = &result.include else {
            return result;
        };
        let (client, ns) = (&self.r.ctx.client, &self.flow_ref.namespace);
        match observe::secret_steps(client, ns, name, key, sha256).await {
            Ok(steps) => StepResult {
                include: Some(IncludedDocument::Steps {
                    steps,
                    vars: Default::default(),
                }),
                ..result.clone()
            },
            Err(why) => StepResult::failed(why.to_string()),
        }
    }

    /// What the walker is told of `result`; steps an include fetched are accepted into the
    /// run (or fail the step, with why), marked when they came `from_secret`.
    fn completion_of(
        &self,
        run: &mut StoredRun,
        node: &PlanNode,
        result: &StepResult,
        from_secret: bool,
    ) -> Completion {
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
                from_secret,
            };
            let flow_ref = self.flow_ref;
            let root = format!("{}/{}", flow_ref.namespace, flow_ref.name);
            if let Err(e) = includes::accept(self.plan, &root, node, fetched, &mut run.includes) {
                c.ok = false;
                c.message = e.to_string();
            } else if let Err(e) = includes::check_tenant_data(self.spec, &run.includes) {
                run.includes.remove(&node.id);
                c.ok = false;
                c.message = format!("the included steps take tenant data where it is refused: {e}");
            }
        }
        c
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
                let inst = run.state.get(node, key);
                if self
                    .plan
                    .node(node)
                    .is_some_and(|n| n.in_controller.is_some())
                {
                    let work = self.in_controller_key(run, node, key, inst.attempt);
                    self.r.own.in_controller.abort(&work);
                    continue;
                }
                let job_node = inst.job_node.as_deref().unwrap_or(node);
                let name = self.job_of(run, job_node, key, inst.attempt);
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

    /// The run driver for this run's instances ([`crate::drive`]): a child flow's run sees
    /// its bound object and trigger.
    fn driver(&self) -> Driver<'_> {
        Driver {
            engine: &self.r.ctx.engine,
            flow: self.flow_ref,
            spec: self.spec,
            walker: self.walker,
            bound: self.spec.bound.as_ref().map(|b| (&b.object, &b.trigger)),
        }
    }

    fn scope(&self, run: &StoredRun, node: &PlanNode, key: &[String]) -> Scope {
        self.driver().scope(run, node, key)
    }

    /// Lets the walker decide and carries its decisions out until only Jobs are left to wait
    /// for. Returns when a timer needs the next look.
    async fn drive(&self, run: &mut StoredRun) -> Result<Option<i64>, Error> {
        // Read once per drive, and only when a node step is about to launch.
        let mut node_pods_refused = None;
        loop {
            let outcome = self.walker.advance(&mut run.state, self.r.now);
            let mut progressed = false;
            self.abort(run, &outcome.actions).await;
            for action in &outcome.actions {
                if let WalkAction::Start { node, key, attempt } = action {
                    let start = self.start(run, node, key, *attempt, &mut node_pods_refused);
                    progressed |= start.await?;
                }
            }
            progressed |= self.decide_approvals(run).await;
            if !progressed {
                return Ok(outcome.wake_at);
            }
        }
    }

    /// Starts one instance the walker said to: joins the Job already running it (a fused
    /// step), does controller-local work, skips or refuses it, or launches its Job. Returns
    /// whether it settled something, so the walker has more to decide.
    async fn start(
        &self,
        run: &mut StoredRun,
        node_id: &str,
        key: &[String],
        attempt: u32,
        node_pods_refused: &mut Option<Option<String>>,
    ) -> Result<bool, Error> {
        let node = self.plan.node(node_id).expect("from the plan");
        if node.segment.is_some() {
            if let Some(job_node) = reports::covering_job(self.plan, run, node, key, attempt) {
                return Ok(self
                    .join_covering_job(run, node, key, attempt, job_node)
                    .await);
            }
        }
        if task_of(node).is_none() {
            self.run_locally(run, node, key).await;
            return Ok(true);
        }
        if node.in_controller.is_some() {
            return self.run_in_controller(run, node, key, attempt).await;
        }
        // A fused step's onlyIfChanged is decided in its Job, where the changes of the
        // steps before it are known.
        let only_if_changed = node.segment.is_none()
            && node
                .step_kind()
                .is_some_and(|k| k.params().only_if_changed());
        if only_if_changed && !changed_on_same_node(run, key) {
            let c = Completion {
                ok: true,
                message: "skipped: nothing changed on this node".into(),
                ..Default::default()
            };
            self.walker
                .complete(&mut run.state, node_id, key, c, self.r.now);
            return Ok(true);
        }
        if let Some(why) = self.node_pods_refused(node, node_pods_refused).await? {
            self.complete(run, node_id, key, failed(why)).await;
            return Ok(true);
        }
        self.launch(run, node, key, attempt).await
    }

    /// Publishes step instance `node`/`key`'s `StepStarted` Event (`how`: what follows
    /// "started", where it runs) where it starts, which knows where, and tells the narrator so,
    /// which would otherwise tell it again without.
    async fn tell_started(&self, node: &PlanNode, key: &[String], how: &str) {
        let note = format!("{}: started{how}", step_at(&node.path, key));
        self.r
            .publish(EventType::Normal, "StepStarted", &note)
            .await;
        self.narrator.told(&node.id, key);
    }

    /// A fused step already running in the Job of the steps before it: nothing to launch; its
    /// result is folded if that Job already reported it. Returns whether it did.
    async fn join_covering_job(
        &self,
        run: &mut StoredRun,
        node: &PlanNode,
        key: &[String],
        attempt: u32,
        job_node: String,
    ) -> bool {
        let job = self.job_of(run, &job_node, key, attempt);
        run.state.entry(&node.id, key).job_node = Some(job_node);
        let how = format!(" (in Job {job}, fused with the steps before it)");
        self.tell_started(node, key, &how).await;
        let known = self
            .reports
            .cached(&job)
            .and_then(|r| reports::outcome_of(&r, node, &job));
        match known {
            Some((result, times)) => {
                self.fold(run, &node.id, key, result, times).await;
                true
            }
            None => false,
        }
    }

    /// Completes each waiting `approval` step a decision accepted by [`approval::verdict`]
    /// names: approved, the run goes on; rejected, the step fails naming who rejected it. Who
    /// decided is kept for status; a decision not accepted is said in the step's message.
    /// Returns whether one was decided.
    async fn decide_approvals(&self, run: &mut StoredRun) -> bool {
        let annotations = self.r.flow.metadata.annotations.clone().unwrap_or_default();
        let mut decided = false;
        for (node, key, _) in self.walker.awaiting_decision(&run.state) {
            let step = pseudoflow_walk::step_label(node);
            // First seen waiting in this drive, right after it began: the stamp on the flow
            // then (the previous node's decision in a rolling loop, say) does not count.
            let stale = run
                .state
                .entry(&node.id, &key)
                .stale_stamp
                .get_or_insert_with(|| approval::stamp_mac(&annotations).unwrap_or_default())
                .clone();
            let waiting = approval::Waiting {
                namespace: self.r.ns(),
                name: self.r.flow_id.name,
                step: &step,
                run: &run.run_id,
                stale: &stale,
            };
            let note = format!("waiting for approval: {step}");
            let key_ = self.r.own.approval_key.as_ref();
            let stamp = match approval::verdict(key_, &annotations, waiting) {
                approval::Verdict::Undecided => {
                    run.state.entry(&node.id, &key).message = note;
                    continue;
                }
                approval::Verdict::Ignored(why) => {
                    run.state.entry(&node.id, &key).message = format!("{note} ({why})");
                    continue;
                }
                approval::Verdict::Decided(stamp) => stamp,
            };
            let approved = stamp.decision == approval::Decision::Approve;
            let verb = if approved { "approved" } else { "rejected" };
            let groups = match stamp.groups.as_slice() {
                [] => String::new(),
                g => format!(" (groups {})", g.join(", ")),
            };
            run.state.entry(&node.id, &key).approval = Some(ApprovalRecord {
                decision: if approved { "Approved" } else { "Rejected" }.into(),
                user: stamp.user.clone(),
                groups: stamp.groups.clone(),
                time: crate::flow::status::time(stamp.time.div_euclid(1000)),
            });
            let c = Completion {
                ok: approved,
                message: format!("{verb} by {}{groups}", stamp.user),
                ..Default::default()
            };
            self.complete(run, &node.id, &key, c).await;
            decided = true;
        }
        decided
    }

    /// Controller-local work (`log`, `eval`, `template`, a loop's items): done now, its
    /// variable set and its `log` Event published.
    async fn run_locally(&self, run: &mut StoredRun, node: &PlanNode, key: &[String]) {
        let driver = self.driver();
        let sc = driver.scope(run, node, key);
        let res = driver.run_local(run, node, &sc);
        if let Some(text) = res.event {
            // A `log`'s Event is what it logs.
            self.r.publish(EventType::Normal, "Log", &text).await;
            self.narrator.told(&node.id, key);
        }
        self.complete(run, &node.id, key, res.completion).await;
    }

    /// Why a node step's pod may not run now (no node can report, or the namespace does not
    /// allow privileged pods); None for any other step. Read once per drive (`cache`).
    async fn node_pods_refused(
        &self,
        node: &PlanNode,
        cache: &mut Option<Option<String>>,
    ) -> Result<Option<String>, Error> {
        if node.placement != Placement::Node || task_of(node) != Some(Task::Run) {
            return Ok(None);
        }
        if cache.is_none() {
            let (ctx, allowed) = (self.r.ctx, &self.r.own.node_step_namespaces);
            self.r.own.nodes.settled(NODE_WATCH_SETTLES).await;
            let refused = match self.r.own.nodes.blind() {
                Some(why) => Some(why),
                None => pod_security::check(&ctx.client, allowed, &self.flow_ref.namespace)
                    .await?
                    .map(|r| r.to_string()),
            };
            *cache = Some(refused);
        }
        Ok(cache.clone().flatten())
    }

    /// Lowers the instance (with the rest of its segment when fused) and creates its Job, or
    /// adopts the one a reconcile before created. Returns whether it settled the instance
    /// instead (its step could not be prepared, or the Job was refused).
    async fn launch(
        &self,
        run: &mut StoredRun,
        node: &PlanNode,
        key: &[String],
        attempt: u32,
    ) -> Result<bool, Error> {
        let (ctx, node_id) = (self.r.ctx, node.id.as_str());
        let sc = self.scope(run, node, key);
        let payload = match prepare_payload(&ctx.engine, node, &sc, self.spec.quoting()) {
            Ok((p, _)) => p,
            Err(e) => {
                self.complete(run, node_id, key, failed(e.to_string()))
                    .await;
                return Ok(true);
            }
        };
        let target = sc.get("node").and_then(Value::as_str).map(str::to_string);
        let fused = node.segment.is_some();
        let segment = self.prepare_segment(run, node, key);
        let steps = segment.len();
        let inst = NodeInstance {
            flow: self.flow_ref,
            run_id: &run.run_id,
            node,
            instance: key,
            attempt,
            step: payload,
            target_node: target.as_deref(),
            artifacts: &self.spec.artifact_sources(),
            segment,
            changed_before: fused && changed_on_same_node(run, key),
            run_secret: self.journal_secret(run),
        };
        let opts = LowerOptions {
            image: self.r.own.image.clone(),
            executor: self
                .r
                .own
                .executor
                .for_flow(self.spec.options.executor.as_ref()),
        };
        let lowered = lower(&inst, &opts)?;
        let created = match launch::launch(&ctx.client, &self.flow_ref.uid, &lowered).await? {
            launch::Launched::Created => true,
            launch::Launched::Adopted => false,
            launch::Launched::Refused(why) => {
                self.complete(run, node_id, key, failed(why)).await;
                return Ok(true);
            }
        };
        if fused {
            run.state.entry(node_id, key).job_node = Some(node_id.to_string());
        }
        // Adopted: the reconcile that created it told of it.
        self.narrator.told(node_id, key);
        let job = lowered.job.metadata.name.as_deref().unwrap_or_default();
        if created {
            let on = target
                .as_deref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default();
            let shared = if steps > 1 {
                format!(", which runs it and the {} steps after it", steps - 1)
            } else {
                String::new()
            };
            let how = format!("{on} (Job {job}{shared})");
            self.tell_started(node, key, &how).await;
        }
        info!(node = %node_id, key = ?key, "launched {job}");
        Ok(false)
    }

    /// Fused: the steps the Job of `node` runs (it and the rest of its segment), each prepared
    /// now — none reads what another one sets: see compiler/src/fuse.rs. Empty when unfused.
    fn prepare_segment(
        &self,
        run: &StoredRun,
        node: &PlanNode,
        key: &[String],
    ) -> Vec<pseudoflow_compiler::lower::SegmentStep> {
        let engine = &self.r.ctx.engine;
        let members = fuse::members_from(self.plan, node);
        fuse::segment_steps(&members, |m| {
            let sc = self.scope(run, m, key);
            match m.step_kind() {
                // Controller-local work between Job steps: done now (it reads nothing
                // the segment sets), reported by the Job in its turn.
                Some(k) if task_of(m).is_none() && k.params().waits_seconds().is_none() => Ok(
                    fuse::Prepared::Done(Box::new(local_result(local::run(engine, m, &sc)))),
                ),
                _ => prepare_payload(engine, m, &sc, self.spec.quoting())
                    .map(|(p, _)| fuse::Prepared::Step(p))
                    .map_err(|e| e.to_string()),
            }
        })
    }
}

/// `result`, failed when a variable it sets is nested deeper than the bound: such a value
/// would make the stored run unreadable.
fn bounded_in_depth(result: StepResult) -> StepResult {
    let too_deep = result.vars.iter().find_map(|(k, v)| {
        pseudoflow_compiler::expr::check_depth(v, pseudoflow_compiler::expr::MAX_DEPTH)
            .err()
            .map(|e| format!("variable {k}: {e}"))
    });
    match too_deep {
        Some(why) => StepResult::failed(why),
        None => result,
    }
}

/// What controller-local work produced, as a step result (for a fused segment).
fn local_result(out: local::LocalOutcome) -> StepResult {
    let mut r = StepResult {
        ok: out.completion.ok,
        message: out.completion.message,
        ..Default::default()
    };
    r.vars.extend(out.var);
    r
}

/// Counts and tells the end of `run` once: a metric, a `Run<phase>` Event.
pub(super) async fn finish_if_done(r: &Reconcile<'_>, plan: &Plan, run: &mut StoredRun) {
    if run.state.phase == RunPhase::Running || run.reported {
        return;
    }
    run.reported = true;
    run.finished_at = Some(r.now);
    let (status, ty) = match run.outcome().0 {
        FlowPhase::Succeeded => ("Succeeded", EventType::Normal),
        FlowPhase::Aborted => ("Aborted", EventType::Normal),
        _ => ("Failed", EventType::Warning),
    };
    r.ctx.metrics.run_finished(&r.key(), status);
    let note = run
        .state
        .failure
        .as_ref()
        .map(|f| crate::flow::status::failure_message(plan, f))
        .unwrap_or_else(|| format!("run {} succeeded", run.run_id));
    let note = if r.flow.metadata.deletion_timestamp.is_some() && status == "Failed" {
        format!(
            "{note}; the flow is kept until its onDelete steps succeed: fix the cause and change \
             the {RUN_ANNOTATION} annotation to retry, or remove the finalizer {} (from the flow \
             and from its run-state Secret {}) to delete it anyway",
            on_delete::ON_DELETE,
            super::store::name(r.flow_id.name),
        )
    } else {
        note
    };
    r.publish(ty, &format!("Run{status}"), &note).await;
}
