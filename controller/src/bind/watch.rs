//! The watches of bound flows on their kinds (and related kinds), as each flow's ServiceAccount:
//! any change of a watched object wakes the bound flows that watch it (each decides whether it
//! starts a run), so nothing polls. One watch per kind, scope and ServiceAccount, whatever the
//! number of objects or of bound flows sharing it: a second flow on the same kind as the same
//! account subscribes to the running watch. Watches decode metadata only, so an object's size
//! or depth neither costs memory nor stops a watch. A watch the API refuses is recorded, and the
//! status of every flow subscribed to it says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use tokio::sync::broadcast;

use super::pending::Pending;
use super::watched::Watched;
use crate::backoff::WatchBackoff;
use crate::raw::RawFlow;

/// The flows one watch wakes, by subscriber key (a bound flow's uid, or its [`related_key`]).
type Subscribers = Arc<Mutex<BTreeMap<String, (String, String)>>>;

/// One running watch: its task, the refusal the API last gave it, and whom it wakes.
struct RunningWatch {
    task: tokio::task::JoinHandle<()>,
    refused: Arc<Mutex<Option<String>>>,
    subscribers: Subscribers,
}

#[derive(Default)]
struct WatchTable {
    /// What each subscriber key watches (to move it when that changes).
    subscribed: HashMap<String, String>,
    /// The running watches, by what they watch.
    running: HashMap<String, RunningWatch>,
}

/// The watches of all bound flows, and the channel their events wake bound flows through
/// (each controller loop subscribes: [`Watches::wakes`]).
pub struct Watches {
    state: Mutex<WatchTable>,
    wake: broadcast::Sender<(String, String)>,
    /// Which objects each bound flow has not served since they changed ([`Pending`]).
    pub pending: Arc<Pending>,
}

impl Default for Watches {
    fn default() -> Self {
        Watches {
            state: Mutex::default(),
            wake: broadcast::channel(1024).0,
            pending: Arc::default(),
        }
    }
}

/// The key of bound flow `uid`'s watch on a related kind (one per kind, not per object).
pub fn related_key(uid: &str, api_version: &str, kind: &str) -> String {
    format!("{uid}/related/{api_version}/{kind}")
}

/// What one watch is of: the objects and the flow it wakes.
pub struct Target {
    /// The subscriber: the bound flow's uid ([`related_key`] for a related kind's watch).
    pub uid: String,
    /// The bound flow's namespace and name.
    pub flow: (String, String),
    /// What is watched (kind, scope, identity): subscribers with the same share one watch; a
    /// change moves the subscriber to another.
    pub what: String,
    /// The objects, as the flow's ServiceAccount (all of them: the selector is applied by the
    /// bound flow, so an object that stops matching is seen).
    pub api: Api<Watched>,
    /// Whether every change of an object wakes its flows. When not, an object with a
    /// `generation` wakes them only when its metadata's intent changed
    /// ([`crate::intent::metadata_intent`]): its status written (by a bound flow's child, most of
    /// the time) starts no run, so it need not be read. Part of `what`, so that watches with
    /// and without it are two watches.
    pub every_change: bool,
}

impl Watches {
    /// Whether subscriber `uid` has a running watch on `what`: `Some(refusal)` if it does (the
    /// refusal the API last gave it, if any), `None` if it must be started.
    pub fn running(&self, uid: &str, what: &str) -> Option<Option<String>> {
        let state = self.state.lock().expect("not poisoned");
        if state.subscribed.get(uid).map(String::as_str) != Some(what) {
            return None;
        }
        let w = state.running.get(what)?;
        (!w.task.is_finished()).then(|| w.refused.lock().expect("not poisoned").clone())
    }

    /// Subscribes `t.uid` to the watch on `t.what`, starting it if none runs, and leaves the
    /// watch it had before.
    pub fn start(&self, t: Target) {
        let mut state = self.state.lock().expect("not poisoned");
        unsubscribe(&mut state, &t.uid);
        state.subscribed.insert(t.uid.clone(), t.what.clone());
        if let Some(w) = state.running.get(&t.what).filter(|w| !w.task.is_finished()) {
            let mut subscribers = w.subscribers.lock().expect("not poisoned");
            subscribers.insert(t.uid, t.flow);
            return;
        }
        // A watch whose task ended is started again for everyone subscribed to it.
        let mut carried = match state.running.remove(&t.what) {
            Some(ended) => ended.subscribers.lock().expect("not poisoned").clone(),
            None => BTreeMap::new(),
        };
        carried.insert(t.uid, t.flow);
        let subscribers: Subscribers = Arc::new(Mutex::new(carried));
        let refused = Arc::new(Mutex::new(None));
        let task = tokio::spawn(run(
            t.api,
            t.what.clone(),
            t.every_change,
            Wake {
                flows: self.wake.clone(),
                pending: self.pending.clone(),
            },
            subscribers.clone(),
            refused.clone(),
        ));
        let shared = RunningWatch {
            task,
            refused,
            subscribers,
        };
        state.running.insert(t.what, shared);
    }

    /// Ends the subscriptions of the bound flow `uid` (deleted, or no longer bound): its kind's
    /// and its related kinds' ([`related_key`]); a watch nobody subscribes to stops.
    pub fn stop(&self, uid: &str) {
        self.pending.forget(uid);
        let prefix = format!("{uid}/");
        self.unsubscribe_where(|key| key == uid || key.starts_with(&prefix));
    }

    /// Ends the related-kind subscriptions of bound flow `uid` that are not in `keep` (a kind
    /// dropped from `bind.related`).
    pub fn keep_related(&self, uid: &str, keep: &[String]) {
        let prefix = format!("{uid}/");
        self.unsubscribe_where(|key| key.starts_with(&prefix) && !keep.iter().any(|k| k == key));
    }

    fn unsubscribe_where(&self, leaving: impl Fn(&str) -> bool) {
        let mut state = self.state.lock().expect("not poisoned");
        let keys: Vec<String> = state
            .subscribed
            .keys()
            .filter(|k| leaving(k))
            .cloned()
            .collect();
        for key in keys {
            unsubscribe(&mut state, &key);
        }
    }

    /// How many watches run: one per kind, scope and ServiceAccount watched.
    pub fn count(&self) -> usize {
        let state = self.state.lock().expect("not poisoned");
        state.running.len()
    }

    /// What wakes bound flow `namespace/name` when called (an object's run ended: its
    /// summary counts it).
    pub fn waker(&self, namespace: &str, name: &str) -> impl FnOnce() + Send + 'static {
        let (tx, who) = (self.wake.clone(), (namespace.to_string(), name.to_string()));
        move || {
            let _ = tx.send(who);
        }
    }

    /// The bound flows to reconcile as their objects change, for one controller loop.
    pub fn wakes(&self) -> impl futures::Stream<Item = ObjectRef<RawFlow>> + Send + 'static {
        crate::flow::wake_stream(self.wake.subscribe())
    }
}

/// Takes subscriber `key` off its watch; the watch stops when it was the last.
fn unsubscribe(state: &mut WatchTable, key: &str) {
    let Some(what) = state.subscribed.remove(key) else {
        return;
    };
    let Some(w) = state.running.get(&what) else {
        return;
    };
    let empty = {
        let mut subscribers = w.subscribers.lock().expect("not poisoned");
        subscribers.remove(key);
        subscribers.is_empty()
    };
    if empty {
        w.task.abort();
        state.running.remove(&what);
    }
}

/// Where a watch tells of a change: the flows to wake, and what changed for each.
struct Wake {
    flows: broadcast::Sender<(String, String)>,
    pending: Arc<Pending>,
}

impl Wake {
    /// Records what `ev` changed for each subscriber (`None`: anything may have) and wakes it.
    fn tell(&self, subscribers: &Subscribers, changed: Option<&Watched>) {
        let subscribers: Vec<(String, (String, String))> = {
            let s = subscribers.lock().expect("not poisoned");
            s.iter().map(|(k, f)| (k.clone(), f.clone())).collect()
        };
        let mut flows = BTreeSet::new();
        for (key, flow) in subscribers {
            match (changed, key.split_once('/')) {
                (Some(o), None) => self.pending.changed(
                    &key,
                    o.metadata.namespace.as_deref().unwrap_or_default(),
                    o.metadata.name.as_deref().unwrap_or_default(),
                ),
                // A related object: which objects name it is known only by looking at all.
                (_, Some((uid, _))) => self.pending.everything(uid),
                (None, None) => self.pending.everything(&key),
            }
            flows.insert(flow);
        }
        flows.into_iter().for_each(|f| drop(self.flows.send(f)));
    }
}

/// One watch: every event wakes each subscribed flow once, saying which object changed; a new
/// list or an error (recorded until the next event, so their status says so) has them look at
/// every object. It decodes the objects' metadata only ([`Watched`]): an event only wakes, and
/// an object too deep to decode must not stop the watch.
async fn run(
    api: Api<Watched>,
    what: String,
    every_change: bool,
    wake: Wake,
    subscribers: Subscribers,
    refused: Arc<Mutex<Option<String>>>,
) {
    let mut seen = Intents::default();
    watcher(api, watcher::Config::default())
        .backoff(WatchBackoff::default())
        .for_each(|ev| {
            match ev {
                Ok(watcher::Event::Init) => seen.relist(),
                Ok(watcher::Event::InitApply(o)) => {
                    seen.changed(&o);
                }
                Ok(watcher::Event::InitDone) => {
                    seen.listed();
                    *refused.lock().expect("not poisoned") = None;
                    wake.tell(&subscribers, None);
                }
                Ok(watcher::Event::Apply(o)) => {
                    if seen.changed(&o) || every_change {
                        *refused.lock().expect("not poisoned") = None;
                        wake.tell(&subscribers, Some(&o));
                    }
                }
                Ok(watcher::Event::Delete(o)) => {
                    seen.gone(&o);
                    *refused.lock().expect("not poisoned") = None;
                    wake.tell(&subscribers, Some(&o));
                }
                Err(e) => {
                    *refused.lock().expect("not poisoned") = Some(format!("watching {what}: {e}"));
                    wake.tell(&subscribers, None);
                }
            }
            futures::future::ready(())
        })
        .await
}

/// The intent last seen of each object with a `generation`, by UID, and the one a relist is
/// building (objects deleted while the watch was down are forgotten with the old list).
#[derive(Default)]
struct Intents {
    last: HashMap<String, u64>,
    relisting: Option<HashMap<String, u64>>,
}

impl Intents {
    /// Records `o`'s intent; whether it may have changed anything a bound flow acts on (an
    /// object without a `generation` always may: its content is not seen here).
    fn changed(&mut self, o: &Watched) -> bool {
        let (Some(_), Some(uid)) = (o.metadata.generation, o.metadata.uid.clone()) else {
            return true;
        };
        let h = crate::intent::bound_object_intent(&o.metadata);
        let map = self.relisting.as_mut().unwrap_or(&mut self.last);
        map.insert(uid, h) != Some(h)
    }

    fn gone(&mut self, o: &Watched) {
        if let Some(uid) = &o.metadata.uid {
            self.last.remove(uid);
        }
    }

    fn relist(&mut self) {
        self.relisting = Some(HashMap::new());
    }

    fn listed(&mut self) {
        if let Some(new) = self.relisting.take() {
            self.last = new;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API on a port nothing listens on: the watch's task starts and retries.
    fn api() -> Api<Watched> {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let ar = kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        Api::namespaced_with(client, "ns", &ar)
    }

    fn target(uid: &str, flow: &str, what: &str) -> Target {
        Target {
            uid: uid.into(),
            flow: ("ns".into(), flow.into()),
            what: what.into(),
            api: api(),
            every_change: false,
        }
    }

    fn watched(uid: &str, generation: Option<i64>, labels: &[(&str, &str)]) -> Watched {
        let mut w = Watched::default();
        w.metadata.uid = Some(uid.into());
        w.metadata.generation = generation;
        w.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        w
    }

    #[test]
    fn an_object_wakes_again_only_when_its_intent_changed_unless_it_has_no_generation() {
        let mut seen = Intents::default();
        assert!(seen.changed(&watched("a", Some(1), &[])), "first sight");
        let mut echo = watched("a", Some(1), &[]);
        echo.metadata.resource_version = Some("2".into());
        assert!(!seen.changed(&echo), "a status write only");
        assert!(seen.changed(&watched("a", Some(2), &[])), "spec changed");
        assert!(seen.changed(&watched("a", Some(2), &[("l", "v")])), "label");
        assert!(seen.changed(&watched("b", None, &[])), "no generation");
        assert!(
            seen.changed(&watched("b", None, &[])),
            "no generation, again"
        );
        seen.gone(&watched("a", Some(2), &[("l", "v")]));
        assert!(
            seen.changed(&watched("a", Some(2), &[("l", "v")])),
            "after deletion"
        );
        // A relist records what it lists, and forgets what it did not list.
        seen.relist();
        assert!(
            seen.changed(&watched("c", Some(1), &[])),
            "new in the relist"
        );
        seen.listed();
        assert!(!seen.changed(&watched("c", Some(1), &[])), "listed before");
        assert!(
            seen.changed(&watched("a", Some(2), &[("l", "v")])),
            "not in the relist"
        );
    }

    /// The echo of a bound flow's own writes on its object (its served mark, its child mark,
    /// its finalizer) wakes no flow; anyone else's annotation, finalizer or deletion does.
    #[test]
    fn the_echo_of_a_bound_flows_own_marks_and_finalizer_wakes_nothing() {
        let mut seen = Intents::default();
        let mut w = watched("a", Some(1), &[]);
        assert!(seen.changed(&w), "first sight");
        let served = pseudoflow_crd::protocol::served::mark_key("ns", "widgets");
        let child = crate::bind::claim::mark_key("ns", "widgets");
        let fin = crate::bind::object::finalizer_name("ns", "widgets");
        w.metadata.annotations = Some([(served, "{}".into()), (child, "u".into())].into());
        w.metadata.finalizers = Some(vec![fin.clone()]);
        assert!(!seen.changed(&w), "our marks and finalizer");
        let mut others = w.clone();
        let a = others.metadata.annotations.as_mut().unwrap();
        a.insert("team".into(), "x".into());
        assert!(seen.changed(&others), "another annotation");
        assert!(seen.changed(&w), "back to only ours");
        let mut theirs = w.clone();
        theirs.metadata.finalizers = Some(vec![fin, "example.com/keep".into()]);
        assert!(seen.changed(&theirs), "another finalizer");
        assert!(seen.changed(&w), "back to only ours");
        let mut gone = w.clone();
        gone.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(seen.changed(&gone), "deleted");
    }

    #[tokio::test]
    async fn flows_on_one_kind_as_one_account_share_one_watch_until_the_last_leaves() {
        let w = Watches::default();
        w.start(target("u1", "a", "v1/Widget ns as ns/flow"));
        w.start(target("u2", "b", "v1/Widget ns as ns/flow"));
        assert_eq!(w.count(), 1);
        assert!(w.running("u2", "v1/Widget ns as ns/flow").is_some());
        // Another account is another watch (its rights are its own).
        w.start(target("u3", "c", "v1/Widget ns as ns/other"));
        assert_eq!(w.count(), 2);
        w.stop("u1");
        assert_eq!(w.count(), 2, "u2 still subscribes");
        assert_eq!(w.running("u1", "v1/Widget ns as ns/flow"), None);
        w.stop("u2");
        assert_eq!(w.count(), 1);
        // A subscriber whose `what` changes moves, and the watch it left stops.
        w.start(target("u3", "c", "v1/Gadget ns as ns/other"));
        assert_eq!(w.count(), 1);
        assert_eq!(w.running("u3", "v1/Widget ns as ns/other"), None);
    }

    #[tokio::test]
    async fn a_watch_started_again_after_its_task_ended_still_wakes_its_earlier_subscribers() {
        let w = Watches::default();
        w.start(target("u1", "a", "v1/Widget"));
        w.start(target("u2", "b", "v1/Widget"));
        {
            let state = w.state.lock().unwrap();
            state.running["v1/Widget"].task.abort();
        }
        while w.running("u1", "v1/Widget").is_some() {
            tokio::task::yield_now().await;
        }
        // u2's reconcile finds the watch gone and starts it again.
        w.start(target("u2", "b", "v1/Widget"));
        assert_eq!(w.count(), 1);
        assert!(w.running("u1", "v1/Widget").is_some());
        let state = w.state.lock().unwrap();
        let subscribers = state.running["v1/Widget"].subscribers.lock().unwrap();
        assert_eq!(
            subscribers.keys().collect::<Vec<_>>(),
            ["u1", "u2"],
            "u1 is still woken by the new task"
        );
    }

    #[tokio::test]
    async fn keep_related_drops_only_the_related_kinds_not_kept() {
        let w = Watches::default();
        w.start(target("u1", "a", "v1/Widget"));
        w.start(target(&related_key("u1", "v1", "Secret"), "a", "v1/Secret"));
        w.start(target(
            &related_key("u1", "v1", "ConfigMap"),
            "a",
            "v1/ConfigMap",
        ));
        w.keep_related("u1", &[related_key("u1", "v1", "Secret")]);
        assert_eq!(w.count(), 2);
        assert!(w.running("u1", "v1/Widget").is_some());
        assert!(w
            .running(&related_key("u1", "v1", "Secret"), "v1/Secret")
            .is_some());
    }
}
