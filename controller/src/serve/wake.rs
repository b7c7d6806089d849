//! Which changes of a flow wake a reconcile. Every write the controller makes to a flow comes
//! back through its watch; a status write woke the flow's own reconcile (which then read its
//! run state again to find nothing to do) and, for a bound flow's child, the bound flow (which
//! then read the object and the child again). Counted on a burst of 200 bound objects, those
//! echoes were a third of the controller's reads (bench/README.md). The reflector still sees
//! every change, so a reconcile woken by anything else reads the flow as it is now.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use futures::{Stream, StreamExt};
use kube::runtime::watcher;

use crate::intent::metadata_intent;

use crate::raw::RawFlow;

/// What a flow's own reconcile answers to: its spec (`generation`), what people ask through
/// its metadata (the run, retry and approval annotations, labels), its finalizers, its
/// deletion and its owner. Not its status: only the controller writes it, and the reconcile
/// that wrote it already acted on what it says.
pub fn flow_intent(flow: &RawFlow) -> Option<u64> {
    Some(metadata_intent(&flow.metadata))
}

/// Why a child wakes its bound flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildChange {
    /// Only its run's outcome (phase, message, last run time): the bound flow sums up again.
    Outcome,
    /// What its metadata asks (its spec, deletion, owners, ...), or it is gone: the bound flow
    /// also serves its object again (recreates a deleted child, lets a deleted object go).
    Intent,
}

/// The children of bound flows whose outcome or intent changed, and every deleted one (the
/// bound flow lets a deleted object go once its flow is gone); `on_intent` is told of each
/// child whose intent changed, before it is passed on. kube-runtime's predicate filter cannot
/// be used here: it sees no deletions, and a deleted child's last state is the one it already
/// saw.
pub fn child_changes(
    events: impl Stream<Item = Result<watcher::Event<RawFlow>, watcher::Error>> + Send + 'static,
    on_intent: impl Fn(&RawFlow) + Send + 'static,
) -> impl Stream<Item = Result<RawFlow, watcher::Error>> + Send + 'static {
    let mut seen = ChildHashes::default();
    events.filter_map(move |ev| {
        let out = match ev {
            Ok(ev) => seen.pass(ev).map(|(child, change)| {
                if change == ChildChange::Intent {
                    on_intent(&child);
                }
                Ok(child)
            }),
            Err(e) => Some(Err(e)),
        };
        futures::future::ready(out)
    })
}

/// What was last seen of each child (by UID): the hashes of its intent and of its outcome; and
/// what a relist is building.
#[derive(Default)]
struct ChildHashes {
    last: HashMap<String, (u64, u64)>,
    relisting: Option<HashMap<String, (u64, u64)>>,
}

impl ChildHashes {
    /// The child to look at for `ev`, and why; `None` if nothing the bound flow reads changed.
    fn pass(&mut self, ev: watcher::Event<RawFlow>) -> Option<(RawFlow, ChildChange)> {
        let uid = |c: &RawFlow| c.metadata.uid.clone().unwrap_or_default();
        match ev {
            watcher::Event::Init => {
                self.relisting = Some(HashMap::new());
                None
            }
            watcher::Event::InitApply(c) => {
                let now = hashes(&c);
                let before = self.last.get(&uid(&c)).copied();
                self.relisting.get_or_insert_default().insert(uid(&c), now);
                classify(before, now, &c).map(|why| (c, why))
            }
            // Children deleted while the watch was down are forgotten with the old list.
            watcher::Event::InitDone => {
                self.last = self.relisting.take().unwrap_or_default();
                None
            }
            watcher::Event::Apply(c) => {
                let now = hashes(&c);
                let before = self.last.insert(uid(&c), now);
                classify(before, now, &c).map(|why| (c, why))
            }
            watcher::Event::Delete(c) => {
                self.last.remove(&uid(&c));
                Some((c, ChildChange::Intent))
            }
        }
    }
}

/// Why `child` (whose hashes were `before`, now `now`) wakes its bound flow, if it does.
fn classify(before: Option<(u64, u64)>, now: (u64, u64), child: &RawFlow) -> Option<ChildChange> {
    if unreported(child) {
        return None;
    }
    match before {
        Some((intent, _)) if intent != now.0 => Some(ChildChange::Intent),
        None => Some(ChildChange::Intent),
        Some((_, outcome)) if outcome != now.1 => Some(ChildChange::Outcome),
        Some(_) => None,
    }
}

/// The hashes of a child's intent ([`metadata_intent`]) and of its outcome ([`child_outcome`]).
fn hashes(child: &RawFlow) -> (u64, u64) {
    (metadata_intent(&child.metadata), child_outcome(child))
}

/// A child its bound flow has just made (or remade): no status yet, not being deleted. The
/// bound flow knows all there is to know of it; its first status write says more.
fn unreported(child: &RawFlow) -> bool {
    child.status.is_none() && child.metadata.deletion_timestamp.is_none()
}

/// What a bound flow sums up of its child: its run's phase, message and last run time, not the
/// rest of its status (per-step progress, timings).
fn child_outcome(child: &RawFlow) -> u64 {
    let mut h = DefaultHasher::new();
    if let Some(status) = child.status_value() {
        for field in ["phase", "message", "lastRunTime"] {
            status[field].to_string().hash(&mut h);
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn flow(v: Value) -> RawFlow {
        serde_json::from_value(v).unwrap()
    }

    fn base() -> Value {
        json!({
            "metadata": {"name": "f", "namespace": "ns", "uid": "u1", "generation": 1,
                         "annotations": {"a": "1"}, "resourceVersion": "10"},
            "spec": {"steps": []},
            "status": {"phase": "Running", "message": "m", "steps": {"a": {"phase": "Running"}}}
        })
    }

    fn with(path: &[&str], value: Value) -> RawFlow {
        let mut v = base();
        let mut at = &mut v;
        for p in &path[..path.len() - 1] {
            at = &mut at[*p];
        }
        at[path[path.len() - 1]] = value;
        flow(v)
    }

    #[test]
    fn a_status_write_does_not_wake_the_flow_but_its_spec_metadata_and_deletion_do() {
        let before = flow_intent(&flow(base()));
        let status = with(&["status", "phase"], json!("Succeeded"));
        let rv = with(&["metadata", "resourceVersion"], json!("11"));
        assert_eq!(flow_intent(&status), before);
        assert_eq!(flow_intent(&rv), before);
        for changed in [
            with(&["metadata", "generation"], json!(2)),
            with(
                &["metadata", "annotations", "ops.example.com/run"],
                json!("x"),
            ),
            with(&["metadata", "labels"], json!({"l": "v"})),
            with(
                &["metadata", "finalizers"],
                json!(["ops.example.com/on-delete"]),
            ),
            with(
                &["metadata", "deletionTimestamp"],
                json!("2026-11-26T00:00:00Z"),
            ),
            with(&["metadata", "uid"], json!("u2")),
            with(
                &["metadata", "ownerReferences"],
                json!([{"apiVersion": "ops.example.com/v1beta1", "kind": "PseudoFlow",
                        "name": "p", "uid": "p1", "controller": true}]),
            ),
        ] {
            assert_ne!(flow_intent(&changed), before, "{:?}", changed.metadata);
        }
    }

    #[test]
    fn a_child_wakes_its_bound_flow_to_sum_up_for_its_outcome_and_to_serve_for_its_intent() {
        use watcher::Event::*;
        use ChildChange::*;
        let why = |seen: &mut ChildHashes, ev| seen.pass(ev).map(|(_, w)| w);
        let mut seen = ChildHashes::default();
        let mut made = flow(base());
        made.status = None;
        assert_eq!(why(&mut seen, Apply(made.clone())), None, "just made");
        let running = || flow(base());
        assert_eq!(
            why(&mut seen, Apply(running())),
            Some(Outcome),
            "first status"
        );
        let steps = with(&["status", "steps", "a", "phase"], json!("Succeeded"));
        assert_eq!(why(&mut seen, Apply(steps)), None, "step progress only");
        for (path, value) in [
            (&["status", "phase"][..], json!("Succeeded")),
            (&["status", "message"][..], json!("other")),
            (
                &["status", "lastRunTime"][..],
                json!("2026-11-26T00:00:00Z"),
            ),
        ] {
            assert_eq!(why(&mut seen, Apply(with(path, value))), Some(Outcome));
            assert_eq!(why(&mut seen, Apply(running())), Some(Outcome));
        }
        let respec = with(&["metadata", "generation"], json!(2));
        assert_eq!(
            why(&mut seen, Apply(respec)),
            Some(Intent),
            "its spec changed"
        );
        let deleting = with(
            &["metadata", "deletionTimestamp"],
            json!("2026-11-26T00:00:00Z"),
        );
        assert_eq!(why(&mut seen, Apply(deleting.clone())), Some(Intent));
        assert_eq!(
            why(&mut seen, Delete(deleting)),
            Some(Intent),
            "gone, unchanged"
        );
        made.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(
            why(&mut seen, Apply(made)),
            Some(Intent),
            "deleted before it ran"
        );
        // A relist: unchanged children are dropped, changed ones pass, unseen ones are served.
        let mut seen = ChildHashes::default();
        let done = || with(&["status", "phase"], json!("Succeeded"));
        assert_eq!(why(&mut seen, Apply(done())), Some(Intent), "first sight");
        assert_eq!(why(&mut seen, Init), None);
        assert_eq!(why(&mut seen, InitApply(done())), None);
        assert_eq!(why(&mut seen, InitDone), None);
        assert_eq!(why(&mut seen, Apply(running())), Some(Outcome));
    }
}
