//! One watch per bound flow on its kind, as the flow's ServiceAccount: any change of a matching
//! object wakes the bound flow's reconcile (which decides whether it starts a run), so nothing
//! polls. A watch the API refuses is recorded, and the flow's status says so.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use tokio::sync::broadcast;

use crate::backoff::WatchBackoff;
use crate::raw::RawFlow;

/// A bound flow's watch: what it watches (to replace it when that changes) and its task.
struct Watch {
    what: String,
    task: tokio::task::JoinHandle<()>,
    refused: Arc<Mutex<Option<String>>>,
}

/// The watches of all bound flows, by the bound flow's uid, and the channel their events wake
/// bound flows through (each controller loop subscribes: [`Watches::wakes`]).
pub struct Watches {
    by_flow: Mutex<HashMap<String, Watch>>,
    wake: broadcast::Sender<(String, String)>,
}

impl Default for Watches {
    fn default() -> Self {
        Watches {
            by_flow: Mutex::default(),
            wake: broadcast::channel(1024).0,
        }
    }
}

/// The key of bound flow `uid`'s watch on a related kind (one per kind, not per object).
pub fn related_key(uid: &str, api_version: &str, kind: &str) -> String {
    format!("{uid}/related/{api_version}/{kind}")
}

/// What one watch is of: the objects and the flow it wakes.
pub struct Target {
    /// The bound flow's uid ([`related_key`] for a related kind's watch).
    pub uid: String,
    /// The bound flow's namespace and name.
    pub flow: (String, String),
    /// A description of what is watched (kind, scope, selector, identity): a change replaces it.
    pub what: String,
    /// The objects, as the flow's ServiceAccount (all of them: the selector is applied by the
    /// bound flow, so an object that stops matching is seen).
    pub api: Api<DynamicObject>,
}

impl Watches {
    /// Whether the watch of bound flow `uid` on `what` runs: `Some(refusal)` if it does (the
    /// refusal the API last gave it, if any), `None` if it must be started.
    pub fn running(&self, uid: &str, what: &str) -> Option<Option<String>> {
        let map = self.by_flow.lock().expect("not poisoned");
        let w = map.get(uid)?;
        (w.what == what && !w.task.is_finished())
            .then(|| w.refused.lock().expect("not poisoned").clone())
    }

    /// Starts the watch for `t`, replacing the bound flow's earlier one.
    pub fn start(&self, t: Target) {
        let mut map = self.by_flow.lock().expect("not poisoned");
        if let Some(w) = map.remove(&t.uid) {
            w.task.abort();
        }
        let refused = Arc::new(Mutex::new(None));
        let (wake, flow, seen) = (self.wake.clone(), t.flow.clone(), refused.clone());
        let task = tokio::spawn(async move {
            watcher(t.api, watcher::Config::default())
                .backoff(WatchBackoff::default())
                .for_each(|ev| {
                    match ev {
                        Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                        Ok(_) => {
                            *seen.lock().expect("not poisoned") = None;
                            let _ = wake.send(flow.clone());
                        }
                        Err(e) => {
                            let said = format!("watching {}: {e}", flow.1);
                            *seen.lock().expect("not poisoned") = Some(said);
                            let _ = wake.send(flow.clone());
                        }
                    }
                    futures::future::ready(())
                })
                .await
        });
        let what = t.what;
        map.insert(
            t.uid,
            Watch {
                what,
                task,
                refused,
            },
        );
    }

    /// Stops the watches of the bound flow `uid` (deleted, or no longer bound): its kind's
    /// and its related kinds' ([`related_key`]).
    pub fn stop(&self, uid: &str) {
        let prefix = format!("{uid}/");
        let mut map = self.by_flow.lock().expect("not poisoned");
        map.retain(|key, w| {
            let mine = key == uid || key.starts_with(&prefix);
            if mine {
                w.task.abort();
            }
            !mine
        });
    }

    /// Stops the related-kind watches of bound flow `uid` that are not in `keep` (a kind
    /// dropped from `bind.related`).
    pub fn keep_related(&self, uid: &str, keep: &[String]) {
        let prefix = format!("{uid}/");
        let mut map = self.by_flow.lock().expect("not poisoned");
        map.retain(|key, w| {
            let dropped = key.starts_with(&prefix) && !keep.contains(key);
            if dropped {
                w.task.abort();
            }
            !dropped
        });
    }

    /// The bound flows to reconcile as their objects change, for one controller loop.
    pub fn wakes(&self) -> impl futures::Stream<Item = ObjectRef<RawFlow>> + Send + 'static {
        let rx = self.wake.subscribe();
        futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok((ns, name)) => return Some((ObjectRef::new(&name).within(&ns), rx)),
                    // Missed wakes: the flows still get their periodic look.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }
}
