//! One object's run, in the controller's memory, to its end: the walker's advance/complete
//! loop over the plan a child would have, each controller-local node evaluated here and each
//! API step run by [`crate::in_controller`] (same turns, same impersonated client, same
//! timeouts). Nothing is stored: a controller killed midway runs the object again, which is
//! safe because the compiler placed only repeatable steps here
//! (`pseudoflow_compiler::record`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pseudoflow_compiler::expr::{prepare_payload, Scope};
use pseudoflow_compiler::lower::{in_controller_input, task_of, FlowRef, NodeInstance};
use pseudoflow_compiler::names::job_name;
use pseudoflow_compiler::plan::PlanNode;
use pseudoflow_compiler::Compiled;
use pseudoflow_crd::bind::{OBJECT_VAR, TRIGGER_VAR};
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_walk::fold::merge_var;
use pseudoflow_walk::{includes, local, Action, Completion, RunPhase, StoredRun, Walker};
use serde_json::Value;

use crate::in_controller::{self, InControllerSteps, Request, Seen};

/// Most rounds of the walk one serve takes (a plan is bounded; this only stops a bug looping).
const MAX_ROUNDS: usize = 10_000;

/// What one object's run needs besides its plan.
pub struct Runner<'a> {
    /// The expression engine (`${...}`).
    pub engine: &'a pseudoflow_compiler::Engine,
    /// The steps the controller runs itself (turns shared with plain flows).
    pub steps: &'a InControllerSteps,
    /// The bound flow (its uid shares the per-flow turns among its objects).
    pub flow: FlowRef,
    /// A client acting as the flow's ServiceAccount.
    pub client: kube::Client,
    /// The object (`${object}`) and what started its run (`${trigger}`).
    pub object: Value,
    /// See [`Runner::object`].
    pub trigger: Value,
    /// Where each step's time is counted (`pseudoflow_step_duration_seconds`), under the bound
    /// flow's `namespace/name`.
    pub metrics: &'a crate::metrics::Metrics,
}

/// When an object's run must have ended (the flow's `options.timeoutSeconds`, if it has one),
/// and what its failure says if it has not. The run goes on in a task of its own
/// ([`super::tasks`]), so nothing else bounds it: its waits hold no turn, and each step keeps
/// its own `timeoutSeconds`. Time its steps spent queuing for a share of the controller's
/// turns is not the run's: it moves the deadline on ([`Deadline::queued`]), so that other
/// tenants' work can delay a run but never fail it
/// (docs/decisions.md#api-steps-in-the-controller).
struct Deadline {
    from: tokio::time::Instant,
    /// None: the run is not cut.
    seconds: Option<u64>,
    /// Milliseconds queued for turns so far.
    queued_ms: AtomicU64,
}

/// How far off "never" is, for a run without a timeout (a year: far enough, and no overflow).
const NEVER: Duration = Duration::from_secs(365 * 24 * 3600);

impl Deadline {
    /// The flow's `options.timeoutSeconds`, if any.
    fn of(compiled: &Compiled) -> Self {
        let asked = compiled.spec.options.timeout_seconds.map(u64::from);
        Deadline {
            from: tokio::time::Instant::now(),
            seconds: asked.map(|s| s.max(1)),
            queued_ms: AtomicU64::new(0),
        }
    }

    #[cfg(test)]
    fn after(seconds: u64) -> Self {
        Deadline {
            from: tokio::time::Instant::now(),
            seconds: Some(seconds),
            queued_ms: AtomicU64::new(0),
        }
    }

    /// The instant the run is cut at.
    fn at(&self) -> tokio::time::Instant {
        let Some(seconds) = self.seconds else {
            return self.from + NEVER;
        };
        let queued = Duration::from_millis(self.queued_ms.load(Ordering::Relaxed));
        self.from + Duration::from_secs(seconds) + queued
    }

    /// A step of the run queued `took` for its turn: the deadline moves on by as much.
    fn queued(&self, took: Duration) {
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        self.queued_ms.fetch_add(ms, Ordering::Relaxed);
    }

    fn passed_by(&self, wait_seconds: u64) -> bool {
        tokio::time::Instant::now() + Duration::from_secs(wait_seconds) >= self.at()
    }

    fn message(&self) -> String {
        let n = self.seconds.unwrap_or_default();
        format!("timed out after {n}s (the flow's options.timeoutSeconds)")
    }
}

impl Runner<'_> {
    /// Runs `compiled` (from `spec`, kept so a failure's redaction spares what the spec
    /// says) to its end; returns the run (its state's phase, failure and variables) and
    /// whether its last failure is permanent: a step that could not be rendered from the
    /// object and the run's variables (an expression or a payload that no retry can mend).
    pub async fn run(&self, compiled: &Compiled, spec: &Value, run_id: &str) -> (StoredRun, bool) {
        let mut run = StoredRun {
            run_id: run_id.to_string(),
            started_at: now(),
            spec: Some(spec.clone()),
            ..Default::default()
        };
        let walker = Walker::new(&compiled.plan);
        let deadline = Deadline::of(compiled);
        let mut permanent = false;
        for _ in 0..MAX_ROUNDS {
            let out = walker.advance(&mut run.state, now());
            let starts: Vec<_> = out
                .actions
                .iter()
                .filter_map(|a| match a {
                    Action::Start { node, key, attempt } => Some((node, key, *attempt)),
                    Action::Abort { .. } => None,
                })
                .collect();
            if starts.is_empty() {
                if run.state.phase != RunPhase::Running {
                    break;
                }
                let Some(at) = out.wake_at else { break };
                // A retry's backoff or a `sleep`: the run's task waits, holding nothing.
                let wait = u64::try_from(at - now()).unwrap_or(0).clamp(1, 300);
                if deadline.passed_by(wait) {
                    walker.time_out(&mut run.state, &deadline.message());
                    permanent = false;
                    break;
                }
                tokio::time::sleep(Duration::from_secs(wait)).await;
                continue;
            }
            if deadline.passed_by(0) {
                walker.time_out(&mut run.state, &deadline.message());
                permanent = false;
                break;
            }
            for (node_id, key, attempt) in starts {
                let node = compiled.plan.node(node_id).expect("from the plan");
                let began = std::time::Instant::now();
                let at = (node, key.as_slice(), &deadline);
                let c = self.start(compiled, &walker, &mut run, at, attempt);
                let (c, cannot_mend) = c.await;
                if !c.ok {
                    permanent = cannot_mend;
                }
                if node.kind == pseudoflow_compiler::NodeKind::Action {
                    let key = format!("{}/{}", self.flow.namespace, self.flow.name);
                    let took = began.elapsed().as_secs_f64();
                    self.metrics.step_finished(&key, &node.step_type, took);
                }
                walker.complete(&mut run.state, node_id, key, c, now());
            }
        }
        run.finished_at = Some(now());
        (run, permanent)
    }

    /// Does one instance's work; returns what the walker is told, and whether a failure is
    /// one no retry can mend (the step could not be rendered).
    async fn start(
        &self,
        compiled: &Compiled,
        walker: &Walker<'_>,
        run: &mut StoredRun,
        (node, key, deadline): (&PlanNode, &[String], &Deadline),
        attempt: u32,
    ) -> (Completion, bool) {
        let sc = self.scope(compiled, walker, run, node, key);
        if task_of(node).is_none() {
            // Controller-local work is expressions only: what fails them fails them again.
            let res = local::run(self.engine, node, &sc);
            if let Some((k, v)) = res.var {
                run.vars.insert(k, v);
            }
            return (res.completion.into(), true);
        }
        if matches!(node.kind, pseudoflow_compiler::NodeKind::Condition) {
            return self
                .condition(compiled, run, (node, key, deadline), attempt, &sc)
                .await;
        }
        if node.in_controller.is_none() {
            // The compiler refuses such a flow; never a pod from here.
            let why = format!("{}: bind.record: Object runs no step in a pod", node.path);
            return (failed(why), true);
        }
        let mut cannot_mend = false;
        let result = match self.in_controller(compiled, run, node, key, attempt, &sc) {
            Ok((work, started)) => {
                let queuing = tokio::time::Instant::now();
                // Unfired (dropped) only if the step ended before it held a turn.
                let _ = started.held.await;
                deadline.queued(queuing.elapsed());
                if tokio::time::timeout_at(deadline.at(), started.ended)
                    .await
                    .is_err()
                {
                    self.steps.abort(&work);
                    let why = format!("{}: {}", node.path, deadline.message());
                    return (failed(why), false);
                }
                match self.steps.take(&work) {
                    Seen::Done(result, _) => *result,
                    _ => StepResult::failed(format!("{}: the step was stopped", node.path)),
                }
            }
            Err(why) => {
                cannot_mend = true;
                StepResult::failed(why)
            }
        };
        let result = crate::redact::failure(run, result);
        for (k, v) in &result.vars {
            merge_var(&mut run.vars, k, v.clone());
        }
        let c = Completion {
            ok: result.ok,
            changed: result.changed,
            message: result.message,
            condition: result.condition,
            items: None,
        };
        (c, cannot_mend)
    }

    /// Evaluates an `if`/`when` condition here, as the executor's pod would (one read of one
    /// object as the flow's ServiceAccount and its jsonPath test, `pseudoflow_runtime`), within
    /// the run's deadline; returns what the walker is told and whether a failure is permanent
    /// (the condition could not be rendered). A single GET: it takes no in-controller turn.
    async fn condition(
        &self,
        compiled: &Compiled,
        run: &mut StoredRun,
        (node, key, deadline): (&PlanNode, &[String], &Deadline),
        attempt: u32,
        sc: &Scope,
    ) -> (Completion, bool) {
        let quoting = compiled.spec.quoting();
        let step = match prepare_payload(self.engine, node, sc, quoting) {
            Ok((step, _)) => step,
            Err(e) => return (failed(e.to_string()), true),
        };
        let mut input = self.input(run, (node, key), attempt, step);
        input.task = pseudoflow_crd::protocol::Task::Condition;
        let parsed: pseudoflow_crd::Step = match serde_json::from_value(input.step.clone()) {
            Ok(s) => s,
            Err(e) => return (failed(format!("{}: step: {e}", node.path)), true),
        };
        let nowhere = std::path::PathBuf::from("/nonexistent");
        let ctx = pseudoflow_runtime::ExecCtx::new(input, nowhere, "false".into())
            .with_client(self.client.clone());
        let read = pseudoflow_runtime::execute(&ctx, &parsed);
        let result = match tokio::time::timeout_at(deadline.at(), read).await {
            Err(_) => {
                let why = format!("{}: {}", node.path, deadline.message());
                return (failed(why), false);
            }
            Ok(Ok(r)) => r,
            Ok(Err(e)) => StepResult::failed(e.to_string()),
        };
        let result = crate::redact::failure(run, result);
        let c = Completion {
            ok: result.ok,
            changed: result.changed,
            message: result.message,
            condition: result.condition,
            items: None,
        };
        (c, false)
    }

    /// The executor input of one instance of `node` run in the controller (no node, no pod).
    fn input(
        &self,
        run: &StoredRun,
        (node, key): (&PlanNode, &[String]),
        attempt: u32,
        step: Value,
    ) -> pseudoflow_crd::protocol::ExecutorInput {
        in_controller_input(&NodeInstance {
            flow: &self.flow,
            run_id: &run.run_id,
            node,
            instance: key,
            attempt,
            step,
            target_node: None,
            artifacts: &[],
            segment: Vec::new(),
            changed_before: false,
            run_secret: None,
        })
    }

    /// Starts the instance's API step in the controller; returns its key and its end.
    fn in_controller(
        &self,
        compiled: &Compiled,
        run: &StoredRun,
        node: &PlanNode,
        key: &[String],
        attempt: u32,
        sc: &Scope,
    ) -> Result<(String, in_controller::Started), String> {
        let quoting = compiled.spec.quoting();
        let (step, _) =
            prepare_payload(self.engine, node, sc, quoting).map_err(|e| e.to_string())?;
        let input = self.input(run, (node, key), attempt, step);
        let job = job_name(&self.flow.name, &run.run_id, &node.id, key, attempt.max(1));
        let work = in_controller::key(&self.flow.uid, &job);
        let req = Request {
            key: work.clone(),
            flow: (self.flow.namespace.clone(), self.flow.name.clone()),
            flow_uid: self.flow.uid.clone(),
            client: self.client.clone(),
            input,
        };
        Ok((work, self.steps.start(req)))
    }

    /// The variables the instance sees: the flow's, `object` and `trigger` as a child sees
    /// them, what earlier steps set, and its loop's.
    fn scope(
        &self,
        compiled: &Compiled,
        walker: &Walker<'_>,
        run: &StoredRun,
        node: &PlanNode,
        key: &[String],
    ) -> Scope {
        let plan = &compiled.plan;
        let vars = &compiled.spec.vars;
        let mut s: Scope = includes::base_vars(plan, node, vars, &BTreeMap::new())
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        s.insert(OBJECT_VAR.into(), self.object.clone());
        s.insert(TRIGGER_VAR.into(), self.trigger.clone());
        s.extend(run.vars.clone());
        s.extend(walker.loop_vars(node, key, &run.state));
        s
    }
}

fn failed(message: String) -> Completion {
    Completion {
        ok: false,
        message,
        ..Default::default()
    }
}

fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_queued_for_a_turn_moves_the_deadline_on() {
        let deadline = Deadline::after(10);
        assert_eq!(deadline.at(), deadline.from + Duration::from_secs(10));
        assert!(deadline.passed_by(10) && !deadline.passed_by(8));
        deadline.queued(Duration::from_secs(5));
        deadline.queued(Duration::from_millis(500));
        assert_eq!(deadline.at(), deadline.from + Duration::from_millis(15_500));
        assert!(!deadline.passed_by(14), "5.5 s queued are not the run's");
        assert!(deadline.passed_by(16), "its own 10 s still end it");
    }
}
