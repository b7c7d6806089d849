//! One object's run, in the controller's memory, to its end: the walker's advance/complete
//! loop over the plan a child would have, each instance carried out by the run driver
//! ([`crate::drive`]: the same scope, local nodes and in-controller steps as a flow's run), its
//! API steps run by [`crate::in_controller`] (same turns, same impersonated client, same
//! timeouts). Nothing is stored for a run of repeatable steps: a controller killed midway runs
//! the object again. A step not safe to repeat (an `exec` in another pod, placed here by the
//! compiler: `pseudoflow_compiler::record`) runs only once the run's progress is kept on the
//! object, naming it as begun, and the progress is kept again when it ended ([`super::progress`]):
//! a restarted controller resumes from there and never runs it a second time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pseudoflow_compiler::lower::{task_of, FlowRef};
use pseudoflow_compiler::plan::PlanNode;
use pseudoflow_compiler::Compiled;
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_walk::fold::merge_var;
use pseudoflow_walk::{Action, Completion, RunPhase, StoredRun, Walker};
use serde_json::Value;

use super::progress::{Keeper, Progress};
use crate::drive::condition::Evaluated;
use crate::drive::{failed, Driver};
use crate::flow::status::{said_at, step_at};
use crate::in_controller::{InControllerSteps, Seen};

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
    /// Where the run's progress is kept while it has a step not safe to repeat.
    pub progress: &'a Keeper,
    /// Where each step's time is counted (`pseudoflow_step_duration_seconds`), under the bound
    /// flow's `namespace/name`.
    pub metrics: &'a crate::metrics::Metrics,
    /// The failures the run went on after (`continueOnError`, `onError`, a retry's attempt),
    /// each as `path[item]: message`, at most [`MAX_WENT_ON`]: told on the object as
    /// `StepFailed` Warnings, as a child's run tells them on its flow.
    pub went_on: std::sync::Mutex<Vec<String>>,
    /// What its `log` steps logged, in order, at most [`MAX_LOGGED`]: told on the object as
    /// `Log` Events, as a child's run tells them on its flow (kopf posts its handlers' log
    /// lines as Events on the object too).
    pub logged: std::sync::Mutex<Vec<String>>,
}

/// Most `log` messages one object's run tells (a loop logging each of a thousand items is not
/// a thousand Events).
pub const MAX_LOGGED: usize = 20;

/// Most failures one object's run tells as `StepFailed` (a loop of a thousand failing items
/// is not a thousand Events).
pub const MAX_WENT_ON: usize = 10;

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
    /// `resume`: the run's progress as a controller before this one kept it.
    pub async fn run(
        &self,
        compiled: &Compiled,
        spec: &Value,
        run_id: &str,
        resume: Option<Progress>,
    ) -> (StoredRun, bool) {
        let mut run = StoredRun {
            run_id: run_id.to_string(),
            started_at: now(),
            spec: Some(spec.clone()),
            ..Default::default()
        };
        let walker = Walker::new(&compiled.plan);
        let mut permanent = false;
        if let Some(p) = resume {
            permanent = self.resumed(&walker, &mut run, p).await;
        }
        let driver = Driver {
            engine: self.engine,
            flow: &self.flow,
            spec: &compiled.spec,
            walker: &walker,
            bound: Some((&self.object, &self.trigger)),
        };
        let deadline = Deadline::of(compiled);
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
                let (c, cannot_mend) = self.start(&driver, &mut run, at, attempt).await;
                if !c.ok {
                    permanent = cannot_mend;
                }
                self.count(node, began);
                let failed = (!c.ok).then(|| said_at(&step_at(&node.path, key), &c.message));
                walker.complete(&mut run.state, node_id, key, c, now());
                if runs_once(node) {
                    self.ended_once(&run).await;
                }
                self.went_on_after(failed, &run);
            }
        }
        run.finished_at = Some(now());
        (run, permanent)
    }

    /// Counts a step's time (`pseudoflow_step_duration_seconds`) under the bound flow.
    fn count(&self, node: &PlanNode, began: std::time::Instant) {
        if node.kind == pseudoflow_compiler::NodeKind::Action {
            let flow = format!("{}/{}", self.flow.namespace, self.flow.name);
            let took = began.elapsed().as_secs_f64();
            self.metrics.step_finished(&flow, &node.step_type, took);
        }
    }

    /// Notes `failed` (a step's failure, said at its path) if the run goes on after it.
    fn went_on_after(&self, failed: Option<String>, run: &StoredRun) {
        if let Some(note) = failed.filter(|_| run.state.phase == RunPhase::Running) {
            let mut went_on = self.went_on.lock().expect("not poisoned");
            if went_on.len() < MAX_WENT_ON {
                went_on.push(note);
            }
        }
    }

    /// Takes the run on from `p`, the progress an earlier controller kept: a step it names as
    /// begun and never ended failed (it may have run; it is never run twice), which is
    /// permanent: no automatic retry of the object runs it again. Returns whether it was.
    async fn resumed(&self, walker: &Walker<'_>, run: &mut StoredRun, p: Progress) -> bool {
        run.run_id = p.run_id;
        run.started_at = p.started_at;
        run.vars = p.vars;
        run.state = p.state;
        let Some((node, key, _)) = p.begun else {
            return false;
        };
        let path = walker.plan().node(&node).map_or(node.as_str(), |n| &n.path);
        let why = format!(
            "{}: the controller stopped while this step ran; it is not run again, as it is not \
             safe to repeat (change the object to run it anew)",
            step_at(path, &key)
        );
        walker.complete(&mut run.state, &node, &key, failed(why), now());
        self.ended_once(run).await;
        true
    }

    /// Keeps the run's progress naming instance `key` of `node` as begun, before it starts: a
    /// restarted controller never runs it again. Unkept, it does not start (what the walker is
    /// told, and whether no retry can mend it).
    async fn begin_once(
        &self,
        run: &StoredRun,
        (node, key): (&PlanNode, &[String]),
        attempt: u32,
    ) -> Result<(), (Completion, bool)> {
        let begun = Some((node.id.clone(), key.to_vec(), attempt));
        let p = Progress::of(self.progress.work(), run, begun);
        self.progress.keep(&p).await.map_err(|e| {
            let cannot_mend = !matches!(e, super::progress::NotKept::Write(_));
            (failed(format!("{}: {e}", node.path)), cannot_mend)
        })
    }

    /// Keeps the run's progress after a step not safe to repeat ended. Unkept, a restarted
    /// controller takes the step as interrupted: it fails, and is not run again.
    async fn ended_once(&self, run: &StoredRun) {
        let p = Progress::of(self.progress.work(), run, None);
        if let Err(e) = self.progress.keep(&p).await {
            tracing::warn!(flow = %self.flow.name, error = %e, "keeping an object's run progress");
        }
    }

    /// Does one instance's work through the run driver; returns what the walker is told, and
    /// whether a failure is one no retry can mend (the step could not be rendered).
    async fn start(
        &self,
        driver: &Driver<'_>,
        run: &mut StoredRun,
        (node, key, deadline): (&PlanNode, &[String], &Deadline),
        attempt: u32,
    ) -> (Completion, bool) {
        let sc = driver.scope(run, node, key);
        if task_of(node).is_none() {
            // Controller-local work is expressions only: what fails them fails them again.
            let local = driver.run_local(run, node, &sc);
            if let Some(text) = local.event {
                let mut logged = self.logged.lock().expect("not poisoned");
                if logged.len() < MAX_LOGGED {
                    logged.push(text);
                }
            }
            return (local.completion, true);
        }
        if matches!(node.kind, pseudoflow_compiler::NodeKind::Condition) {
            let at = (&self.client, deadline.at());
            let evaluated = driver.condition(run, (node, key), attempt, &sc, at).await;
            let result = match evaluated {
                Evaluated::Read(result) => *result,
                Evaluated::Unrenderable(why) => return (failed(why), true),
                Evaluated::TimedOut => {
                    let why = format!("{}: {}", node.path, deadline.message());
                    return (failed(why), false);
                }
            };
            return (completion(crate::redact::failure(run, result)), false);
        }
        if node.in_controller.is_none() {
            // The compiler refuses such a flow; never a pod from here.
            let why = format!("{}: bind.record: Object runs no step in a pod", node.path);
            return (failed(why), true);
        }
        let mut cannot_mend = false;
        let client = || Ok(self.client.clone());
        let result = match driver.request(run, (node, key), attempt, &sc, client) {
            Ok(mut req) => {
                if runs_once(node) {
                    if let Err(refused) = self.begin_once(run, (node, key), attempt).await {
                        return refused;
                    }
                    req.once = true;
                }
                let (work, started) = driver.submit(self.steps, req);
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
        (completion(result), cannot_mend)
    }
}

/// Whether `node` is a step not safe to repeat, run here once under the object's progress
/// record (`pseudoflow_compiler::record::ONCE_REASON`).
fn runs_once(node: &PlanNode) -> bool {
    let params = node.step_kind().map(|k| k.params());
    node.in_controller.is_some()
        && params.is_some_and(|p| !p.runs_in_controller() && p.runs_in_controller_once())
}

/// What the walker is told of a step's result.
fn completion(result: StepResult) -> Completion {
    Completion {
        ok: result.ok,
        changed: result.changed,
        message: result.message,
        condition: result.condition,
        items: None,
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
