//! API steps the controller runs itself, as the flow's ServiceAccount, instead of an executor
//! Job (the compiler decides which: `compiler/src/placement.rs`; docs/decisions.md#api-steps-in-the-controller).
//!
//! The work is the executor's own code (`pseudoflow_runtime::execute`) with a client that
//! impersonates the flow's ServiceAccount, so a step can do exactly what it could do in its pod.
//! Each step runs in a task of its own, making its calls under a work turn shared per flow, per
//! namespace and across the controller, and waiting on a watch under a waiting place instead
//! ([`crate::turns`]); its step timeout starts once it holds them. Its result waits here until
//! the flow's next reconcile folds it; its end wakes that flow. Nothing here is durable: a controller that
//! dies mid-step runs the step again after its restart, which is why only steps whose type says
//! they are safe to repeat are placed here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::reflector::ObjectRef;
use kube::Client;
use pseudoflow_crd::protocol::{ExecutorInput, StepResult};
use pseudoflow_crd::Step;
use pseudoflow_crd::StepKind;
use pseudoflow_runtime::watch::{parking, Park};
use tokio::sync::{broadcast, oneshot};
use tokio::task::AbortHandle;

use crate::limits::MAX_STEP_IN_CONTROLLER_SECONDS;
use crate::raw::RawFlow;
use crate::turns::{Place, Turn, Turns};
use pseudoflow_runtime::kind::Kinds;

/// How long a finished step's result waits for its flow to fold it before it is dropped (the
/// flow was deleted, or its run replaced).
const UNCLAIMED_RESULT_TTL: Duration = Duration::from_secs(600);

/// What the controller knows of one step it runs.
pub enum Seen {
    /// It ended: its result and when it ran (Unix ms, from and to).
    Done(Box<StepResult>, (i64, i64)),
    /// It is running.
    Running,
    /// Nothing: never started here (or this controller restarted since).
    Unknown,
}

enum Entry {
    Running(AbortHandle),
    Done {
        result: Box<StepResult>,
        times: (i64, i64),
        at: Instant,
    },
}

/// One step to run: who asks (for the wake-up), as whom, and what.
pub struct Request {
    /// The step's key ([`key`]).
    pub key: String,
    /// The flow's namespace and name, woken when the step ends.
    pub flow: (String, String),
    /// The flow's uid: its steps share the flow's turns (and the namespace's, `flow.0`).
    pub flow_uid: String,
    /// A client acting as the flow's ServiceAccount.
    pub client: Client,
    /// The executor input an executor Job would have read.
    pub input: ExecutorInput,
    /// The caller records the step's start and end where a restarted controller reads them (a
    /// bound object's sealed progress record), so a step not safe to repeat may run here
    /// ([`pseudoflow_crd::steps::StepParams::runs_in_controller_once`]); false for any other.
    pub once: bool,
}

/// The steps running in the controller and the results not yet folded, shared by every
/// reconcile.
pub struct InControllerSteps {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    turns: Arc<Turns>,
    /// What discovery found, shared by every step run here (a burst of objects asks once per
    /// kind, not once per step).
    kinds: Arc<Kinds>,
    wake: broadcast::Sender<(String, String)>,
}

impl Default for InControllerSteps {
    fn default() -> Self {
        InControllerSteps {
            entries: Arc::default(),
            turns: Arc::default(),
            kinds: Arc::default(),
            wake: broadcast::channel(16 * 1024).0,
        }
    }
}

/// The key of one step instance of one run of one flow: its would-be Job's name (which names
/// the run, node, loop instance and attempt) under the flow's uid.
pub fn key(flow_uid: &str, job_name: &str) -> String {
    format!("{flow_uid}/{job_name}")
}

impl InControllerSteps {
    /// What is known of step `key`; a result is handed out once.
    pub fn take(&self, key: &str) -> Seen {
        let mut entries = self.entries.lock().expect("not poisoned");
        match entries.get(key) {
            None => Seen::Unknown,
            Some(Entry::Running(_)) => Seen::Running,
            Some(Entry::Done { .. }) => match entries.remove(key) {
                Some(Entry::Done { result, times, .. }) => Seen::Done(result, times),
                _ => Seen::Unknown,
            },
        }
    }

    /// Starts the step; [`Started::ended`] fires when it ended (its result is then
    /// [`Self::take`]n) and the flow is woken.
    pub fn start(&self, req: Request) -> Started {
        let (tx, rx) = oneshot::channel();
        let (held_tx, held_rx) = oneshot::channel();
        self.drop_unclaimed();
        let (turns, wake, entries) = (self.turns.clone(), self.wake.clone(), self.entries.clone());
        let kinds = self.kinds.clone();
        let key = req.key.clone();
        // Held while spawning, so the task cannot record its end before it is recorded running.
        let mut held = self.entries.lock().expect("not poisoned");
        let task = tokio::spawn(async move {
            let who = (req.flow.0.as_str(), req.flow_uid.as_str());
            let with = (req.client, kinds);
            let asked = (req.input, req.once);
            let (from, result) = run(turns, who, held_tx, with, asked).await;
            let done = Entry::Done {
                result: Box::new(result),
                times: (from, now_ms()),
                at: Instant::now(),
            };
            let mut entries = entries.lock().expect("not poisoned");
            // Aborted meanwhile (removed): nobody wants the result.
            if let Some(e) = entries.get_mut(&req.key) {
                *e = done;
                drop(entries);
                // The reconcile that started it takes the result if it still waits (it lets go
                // of the receiver before it looks a last time); otherwise the flow is woken.
                if tx.send(()).is_err() {
                    let _ = wake.send(req.flow);
                }
            }
        });
        held.insert(key, Entry::Running(task.abort_handle()));
        Started {
            held: held_rx,
            ended: rx,
        }
    }

    /// The shares its steps take: what a caller (or a test standing for other tenants' work)
    /// holds to see how a run behaves when every turn is taken.
    pub fn turns(&self) -> &Arc<Turns> {
        &self.turns
    }

    /// Another set of steps taking the same turns and waiting places (per flow, per namespace
    /// and global) as these: the bound flows' reconciler runs its objects' steps in its own, so
    /// neither reconciler sees the other's results, and together they still run at most
    /// [`crate::limits::MAX_STEPS_IN_CONTROLLER`].
    pub fn sharing_turns(&self) -> InControllerSteps {
        InControllerSteps {
            entries: Arc::default(),
            turns: self.turns.clone(),
            kinds: self.kinds.clone(),
            wake: broadcast::channel(16).0,
        }
    }

    /// Stops step `key` if it runs (its run was aborted); its result is never folded.
    pub fn abort(&self, key: &str) {
        if let Some(Entry::Running(h)) = self.entries.lock().expect("not poisoned").remove(key) {
            h.abort();
        }
    }

    /// The flows to reconcile as their steps end, for one controller loop.
    pub fn wakes(&self) -> impl futures::Stream<Item = ObjectRef<RawFlow>> + Send + 'static {
        crate::flow::wake_stream(self.wake.subscribe())
    }

    fn drop_unclaimed(&self) {
        let mut entries = self.entries.lock().expect("not poisoned");
        entries.retain(|_, e| match e {
            Entry::Running(_) => true,
            Entry::Done { at, .. } => at.elapsed() < UNCLAIMED_RESULT_TTL,
        });
    }
}

/// A step just started: when it holds its shares, and when it ended.
pub struct Started {
    /// Fires once the step holds its work turn (and its waiting place, if it parks): the time
    /// before it is queuing for a share, which counts against no limit of its run. Dropped
    /// unfired if the step ended before (it could not be read) or was stopped.
    pub held: oneshot::Receiver<()>,
    /// Fires when the step ended.
    pub ended: oneshot::Receiver<()>,
}

/// What a step holds: a work turn while it makes calls, a waiting place once it waits.
struct Held {
    turn: Option<Turn>,
    place: Option<Place>,
}

/// Whether a step of this type parks on a watch (a `waitFor`; a `delete` waiting for its object
/// to go): it takes its waiting place before its work turn, so that neither wait counts against
/// its timeout. Any other step that happens to watch (an `apply` of a CRD, until Established)
/// takes its place when it parks.
fn parks(step: &Step) -> bool {
    matches!(step.kind, StepKind::WaitFor(_) | StepKind::Delete(_))
}

/// Runs one step with the executor's code, as `client`, within its timeout (or
/// [`MAX_STEP_IN_CONTROLLER_SECONDS`]) counted from when it holds its turn (the Unix ms
/// returned with its result), for flow `(namespace, uid)`. Parked on a watch, it lets go of its
/// work turn and holds a waiting place until it ends. Only a type that may run in the
/// controller runs: any other fails without doing anything (the compiler never places one here).
async fn run(
    turns: Arc<Turns>,
    (namespace, flow_uid): (&str, &str),
    held_tx: oneshot::Sender<()>,
    (client, kinds): (Client, Arc<Kinds>),
    (input, once): (ExecutorInput, bool),
) -> (i64, StepResult) {
    let step: Step = match serde_json::from_value(input.step.clone()) {
        Ok(s) => s,
        Err(e) => {
            return (
                now_ms(),
                StepResult::failed(format!("{}: step: {e}", input.path)),
            )
        }
    };
    let params = step.kind.params();
    if !(params.runs_in_controller() || once && params.runs_in_controller_once()) {
        let why = format!(
            "{}: a {} step does not run in the controller",
            input.path,
            step.kind.type_name()
        );
        return (now_ms(), StepResult::failed(why));
    }
    let place = match parks(&step) {
        true => Some(turns.place(namespace).await),
        false => None,
    };
    let turn = Some(turns.turn(namespace, flow_uid).await);
    // Nobody listening (a plain flow's step, whose timeout starts below anyway) is fine.
    let _ = held_tx.send(());
    let held = Arc::new(Mutex::new(Held { turn, place }));
    let park = park_with(held.clone(), turns, namespace.to_string());
    let from = now_ms();
    // No node root and no program to enter one: nothing here acts on a node.
    let ctx =
        pseudoflow_runtime::ExecCtx::new(input, PathBuf::from("/nonexistent"), "false".into())
            .with_client(client)
            .with_kinds(kinds);
    let limit = Duration::from_secs(MAX_STEP_IN_CONTROLLER_SECONDS);
    let work = tokio::time::timeout(limit, pseudoflow_runtime::execute(&ctx, &step));
    let result = match parking(park, work).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => StepResult::failed(e.to_string()),
        Err(_) => StepResult::failed(format!("timed out after {}s", limit.as_secs())),
    };
    drop(held);
    (from, result)
}

/// The step's [`Park`]: it gives back its work turn and, if it has none yet, waits for a
/// waiting place (holding nothing meanwhile). A second call finds nothing to give back.
fn park_with(held: Arc<Mutex<Held>>, turns: Arc<Turns>, namespace: String) -> Park {
    Arc::new(move || {
        let (held, turns, namespace) = (held.clone(), turns.clone(), namespace.clone());
        Box::pin(async move {
            let needs_place = {
                let mut h = held.lock().expect("not poisoned");
                h.turn = None;
                h.place.is_none()
            };
            if needs_place {
                let place = turns.place(&namespace).await;
                held.lock().expect("not poisoned").place = Some(place);
            }
        })
    })
}

fn now_ms() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(step: serde_json::Value) -> ExecutorInput {
        serde_json::from_value(json!({"flow": {"name": "f", "namespace": "ns", "uid": "u",
            "serviceAccount": "flow"}, "runId": "r", "nodeId": "s0", "path": "spec.steps[0]",
            "attempt": 1, "task": "run", "step": step}))
        .expect("an input")
    }

    /// A client whose API server never answers: a step that got as far as a call would hang.
    fn silent_client() -> Client {
        let never = tower::service_fn(|_: http::Request<kube::client::Body>| {
            futures::future::pending::<Result<http::Response<kube::client::Body>, std::io::Error>>()
        });
        Client::new(never, "ns")
    }

    async fn refusal(step: serde_json::Value, once: bool) -> Option<String> {
        let (held, _) = oneshot::channel();
        let with = (silent_client(), Arc::new(Kinds::default()));
        let turns = Arc::new(Turns::default());
        let run = run(turns, ("ns", "u"), held, with, (input(step), once));
        match tokio::time::timeout(Duration::from_millis(500), run).await {
            Ok((_, result)) => Some(result.message),
            Err(_) => None,
        }
    }

    /// A command in the step's own shell never runs in the controller, asked with a progress
    /// record or not; a command in another pod only under one (an object's run keeps it).
    #[tokio::test]
    async fn a_command_runs_here_only_in_another_pod_and_only_under_a_progress_record() {
        let own_shell = json!({"type": "exec", "cmd": "id"});
        for once in [false, true] {
            let refused = refusal(own_shell.clone(), once).await;
            assert_eq!(
                refused.as_deref(),
                Some("spec.steps[0]: a exec step does not run in the controller")
            );
        }
        let in_pod = json!({"type": "exec", "pod": "db-0", "cmd": "id"});
        let refused = refusal(in_pod.clone(), false).await;
        assert_eq!(
            refused.as_deref(),
            Some("spec.steps[0]: a exec step does not run in the controller")
        );
        assert_eq!(
            refusal(in_pod, true).await,
            None,
            "under a record it goes on to pods/exec (the silent API server never answers)"
        );
    }
}
