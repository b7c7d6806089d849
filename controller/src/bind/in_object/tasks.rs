//! Each object's run in a task of its own, as kopf runs each handler: the bound flow's
//! reconcile starts it and goes on serving the other objects, so an object whose run waits (a
//! `waitFor`, a `delete` waiting for its object to go, a `sleep`, a retry's backoff) holds no
//! reconcile and no work turn (a parked step holds a waiting place, `crate::turns`), and no
//! object's run is cut short to let the others through.
//!
//! At most one task per object and flow: a serve that finds the object's run already going for
//! what it would run leaves it; one for something else (the object or the flow changed, the
//! object was deleted) stops it and starts the new one. A task, once done, wakes the bound flow
//! so its summary counts it. Nothing here is durable: a controller that restarts serves every
//! object again, and an object whose run had not recorded its end runs again (only repeatable
//! steps run here: `pseudoflow_compiler::record`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject};
use pseudoflow_crd::bind::Bind;
use serde_json::Value;
use tokio::task::AbortHandle;

/// What one object's run needs once the reconcile that started it has returned.
pub struct Detached {
    /// The bound flow as the reconcile that started the run read it (shared by the runs it
    /// started).
    pub flow: Arc<DynamicObject>,
    /// Its binding and the kind's plural.
    pub bind: Bind,
    /// See [`Detached::bind`].
    pub plural: String,
    /// The objects' API in the object's namespace, as the flow's ServiceAccount.
    pub objects: Api<DynamicObject>,
    /// The object as served.
    pub object: DynamicObject,
    /// Which run.
    pub work: Work,
}

/// Which of an object's runs a task does.
pub enum Work {
    /// Its steps, with what its serve read.
    Steps {
        /// The object as its run and mark see it.
        view: Value,
        /// The annotation key of the flow's served mark, and the mark found there.
        key: String,
        /// See [`Work::Steps::key`].
        raw: Option<String>,
        /// `${trigger}`, and the failed runs in a row before this one.
        trigger: Value,
        /// See [`Work::Steps::trigger`].
        failures: u32,
        /// The revision it runs with (a rollout's: `crate::bind::rollout`).
        with: crate::bind::rollout::With,
        /// Its related objects as its serve read them (`bind.related`: key, version and
        /// content digest), recorded in its mark once it ends.
        related: Vec<(String, crate::bind::related::RelatedSeen)>,
    },
    /// Its `onDelete` steps (it is deleted and carries the flow's finalizer `finalizer`).
    Deleted {
        /// The flow's finalizer on the object.
        finalizer: String,
        /// The revision whose `onDelete` runs (the one that serves the object).
        with: crate::bind::rollout::With,
    },
}

/// Turns a [`Detached`] run into the task's work: given by the controller's loop, which holds
/// what a reconcile borrows (the bound-flow reconciler names no loop: `crate::serve`).
pub type Spawn = Arc<dyn Fn(Detached) -> BoxFuture<'static, ()> + Send + Sync>;

/// How long after an object's run ends its flow is woken (for its summary), so that the runs
/// ending meanwhile share that wake.
pub const WAKE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Most object runs one bound flow has going at once (running or parked). Each holds its
/// object, its compiled spec and its run (~25 KiB): 10,000 objects created at once, all
/// started, took the controller to 272 MiB. Past it the objects wait as names in the flow's
/// queue of changed objects ([`crate::bind::pending`]), as an informer's work queue holds
/// keys, and are started as runs end.
pub const MAX_RUNS_PER_FLOW: usize = 512;

/// The object runs going on, by `<flow uid>/<object uid>`: what each runs for and its task.
#[derive(Default)]
pub struct Tasks {
    by_key: Arc<Mutex<HashMap<String, Going>>>,
    spawn: OnceLock<Spawn>,
    /// The flows (uids) a wake is on its way to.
    waking: Arc<Mutex<std::collections::HashSet<String>>>,
}

struct Going {
    what: String,
    task: AbortHandle,
}

/// What a serve did about an object's run.
#[derive(Debug)]
pub enum Launch {
    /// Its task was started.
    Now,
    /// Its run for the same thing is already going.
    AlreadyGoing,
    /// No task can be started here (no [`Spawn`] given): the caller runs it itself.
    Inline(Box<Detached>),
}

impl std::fmt::Debug for Detached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detached")
            .field("object", &self.object.metadata.name)
            .finish_non_exhaustive()
    }
}

impl Tasks {
    /// Gives how a task is made (once, by the controller's loop).
    pub fn spawn_with(&self, spawn: Spawn) {
        let _ = self.spawn.set(spawn);
    }

    /// The key of `object`'s run for flow `flow` (uids).
    pub fn key(flow: &str, object: &str) -> String {
        format!("{flow}/{object}")
    }

    /// How many more runs of flow `flow` may start ([`MAX_RUNS_PER_FLOW`]).
    pub fn room(&self, flow: &str) -> usize {
        MAX_RUNS_PER_FLOW.saturating_sub(self.count(flow))
    }

    /// Whether the run under `key` (of flow `flow`) may start: one going is replaced in place,
    /// a new one needs [`Tasks::room`].
    pub fn may_start(&self, flow: &str, key: &str) -> bool {
        let going = {
            let by_key = self.by_key.lock().expect("not poisoned");
            by_key.get(key).is_some_and(|g| !g.task.is_finished())
        };
        going || self.room(flow) > 0
    }

    /// Whether the run under `key` is going for `what`.
    pub fn going(&self, key: &str, what: &str) -> bool {
        let by_key = self.by_key.lock().expect("not poisoned");
        by_key.get(key).is_some_and(|g| g.what == what)
    }

    /// Starts the run `d` under `key` for `what`, unless it is going for the same already; one
    /// going for something else is stopped first.
    pub fn start(&self, key: &str, what: &str, d: Detached) -> Launch {
        let Some(spawn) = self.spawn.get() else {
            return Launch::Inline(Box::new(d));
        };
        let mut by_key = self.by_key.lock().expect("not poisoned");
        if let Some(g) = by_key.get(key) {
            if g.what == what && !g.task.is_finished() {
                return Launch::AlreadyGoing;
            }
            g.task.abort();
        }
        let work = spawn(d);
        let (all, k, w) = (self.by_key.clone(), key.to_string(), what.to_string());
        // Held while spawning: the task cannot forget itself before it is recorded.
        let task = tokio::spawn(async move {
            work.await;
            let mut by_key = all.lock().expect("not poisoned");
            if by_key.get(&k).is_some_and(|g| g.what == w) {
                by_key.remove(&k);
            }
        });
        let going = Going {
            what: what.to_string(),
            task: task.abort_handle(),
        };
        by_key.insert(key.to_string(), going);
        Launch::Now
    }

    /// A run of flow `flow` ended: `wake` it [`WAKE_AFTER`] from now (for its summary), unless
    /// a wake is on its way already: the runs that end meanwhile share it, so a burst of
    /// objects costs a few reconciles of their flow, not one per object. Apart from the run's
    /// task, so that stopping the run never loses the wake.
    pub fn wake_soon(&self, flow: &str, wake: impl FnOnce() + Send + 'static) {
        if !self
            .waking
            .lock()
            .expect("not poisoned")
            .insert(flow.to_string())
        {
            return;
        }
        let (waking, flow) = (self.waking.clone(), flow.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(WAKE_AFTER).await;
            waking.lock().expect("not poisoned").remove(&flow);
            wake();
        });
    }

    /// Stops every run of flow `flow` (released, or deleted).
    pub fn stop_flow(&self, flow: &str) {
        let prefix = format!("{flow}/");
        let mut by_key = self.by_key.lock().expect("not poisoned");
        by_key.retain(|k, g| {
            let of_flow = k.starts_with(&prefix);
            if of_flow {
                g.task.abort();
            }
            !of_flow
        });
    }

    /// How many runs of flow `flow` are going.
    pub fn count(&self, flow: &str) -> usize {
        let prefix = format!("{flow}/");
        let by_key = self.by_key.lock().expect("not poisoned");
        by_key
            .iter()
            .filter(|(k, g)| k.starts_with(&prefix) && !g.task.is_finished())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::Notify;

    fn detached() -> Detached {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap()))
                .expect("a client");
        let ar = kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        Detached {
            flow: Arc::new(DynamicObject::new("f", &ar)),
            bind: serde_json::from_value(
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            )
            .unwrap(),
            plural: "configmaps".into(),
            objects: Api::namespaced_with(client, "ns", &ar),
            object: DynamicObject::new("o", &ar),
            work: Work::Deleted {
                finalizer: "f".into(),
                with: crate::bind::rollout::With {
                    hash: "h".into(),
                    spec: None,
                },
            },
        }
    }

    #[tokio::test]
    async fn without_a_spawner_the_caller_runs_it() {
        let tasks = Tasks::default();
        assert!(matches!(
            tasks.start("f/o", "a", detached()),
            Launch::Inline(_)
        ));
    }

    #[tokio::test]
    async fn a_flow_starts_at_most_its_share_of_runs_and_a_going_one_may_be_replaced() {
        let tasks = Tasks::default();
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let r = release.clone();
        tasks.spawn_with(Arc::new(move |_| {
            let r = r.clone();
            Box::pin(async move { drop(r.acquire().await) })
        }));
        for i in 0..MAX_RUNS_PER_FLOW {
            assert!(tasks.may_start("f", &format!("f/o{i}")));
            tasks.start(&format!("f/o{i}"), "a", detached());
        }
        assert_eq!(tasks.room("f"), 0);
        assert!(!tasks.may_start("f", "f/new"), "past its share");
        assert!(
            tasks.may_start("f", "f/o0"),
            "a going one is replaced in place"
        );
        assert!(
            tasks.may_start("g", "g/x"),
            "another flow has its own share"
        );
        release.add_permits(MAX_RUNS_PER_FLOW);
        for _ in 0..100 {
            if tasks.room("f") == MAX_RUNS_PER_FLOW {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            tasks.room("f"),
            MAX_RUNS_PER_FLOW,
            "ended runs free their room"
        );
    }

    #[tokio::test]
    async fn one_run_per_object_a_new_one_replaces_another_and_a_done_one_is_forgotten() {
        let tasks = Tasks::default();
        let release = Arc::new(Notify::new());
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (r, s) = (release.clone(), started.clone());
        tasks.spawn_with(Arc::new(move |_| {
            let (r, s) = (r.clone(), s.clone());
            Box::pin(async move {
                s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                r.notified().await;
            })
        }));
        let now = |s: Launch| matches!(s, Launch::Now);
        assert!(now(tasks.start("f/o", "a", detached())));
        let again = tasks.start("f/o", "a", detached());
        assert!(matches!(again, Launch::AlreadyGoing), "{again:?}");
        assert!(tasks.going("f/o", "a"));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(now(tasks.start("f/o", "b", detached())));
        assert!(tasks.going("f/o", "b") && !tasks.going("f/o", "a"));
        assert!(now(tasks.start("g/o", "a", detached())));
        assert_eq!(tasks.count("f"), 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        release.notify_waiters();
        for _ in 0..100 {
            if tasks.count("f") == 0 && tasks.count("g") == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!((tasks.count("f"), tasks.count("g")), (0, 0));
        assert!(!tasks.going("f/o", "b"), "a finished run is forgotten");
        // "a" (started, then stopped for "b"), "b", and g's.
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn runs_ending_together_share_one_wake_of_their_flow() {
        let tasks = Tasks::default();
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let wake = || {
            let w = woken.clone();
            move || {
                w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        };
        for _ in 0..5 {
            tasks.wake_soon("f", wake());
        }
        tasks.wake_soon("g", wake());
        assert_eq!(
            woken.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "not at once"
        );
        tokio::time::sleep(WAKE_AFTER + Duration::from_millis(200)).await;
        assert_eq!(
            woken.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "once per flow"
        );
        tasks.wake_soon("f", wake());
        tokio::time::sleep(WAKE_AFTER + Duration::from_millis(200)).await;
        assert_eq!(
            woken.load(std::sync::atomic::Ordering::SeqCst),
            3,
            "then again"
        );
    }

    #[tokio::test]
    async fn stopping_a_flow_stops_only_its_runs() {
        let tasks = Tasks::default();
        tasks.spawn_with(Arc::new(|_| Box::pin(std::future::pending())));
        tasks.start("f/o1", "a", detached());
        tasks.start("f/o2", "a", detached());
        tasks.start("g/o1", "a", detached());
        tasks.stop_flow("f");
        assert_eq!((tasks.count("f"), tasks.count("g")), (0, 1));
    }
}
