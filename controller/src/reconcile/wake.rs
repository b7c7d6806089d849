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

use crate::intent::{add_metadata_intent, metadata_intent};

use crate::raw::RawFlow;

/// What a flow's own reconcile answers to: its spec (`generation`), what people ask through
/// its metadata (the run, retry and approval annotations, labels), its finalizers, its
/// deletion and its owner. Not its status: only the controller writes it, and the reconcile
/// that wrote it already acted on what it says.
pub fn flow_intent(flow: &RawFlow) -> Option<u64> {
    Some(metadata_intent(&flow.metadata))
}

/// The children of bound flows whose outcome changed ([`child_outcome`]), and every deleted
/// one (the bound flow lets a deleted object go once its flow is gone). kube-runtime's
/// predicate filter cannot be used here: it sees no deletions, and a deleted child's last
/// state is the one it already saw.
pub fn outcome_changes(
    events: impl Stream<Item = Result<watcher::Event<RawFlow>, watcher::Error>> + Send + 'static,
) -> impl Stream<Item = Result<RawFlow, watcher::Error>> + Send + 'static {
    let mut seen = Seen::default();
    events.filter_map(move |ev| {
        let out = match ev {
            Ok(ev) => seen.pass(ev).map(Ok),
            Err(e) => Some(Err(e)),
        };
        futures::future::ready(out)
    })
}

/// The outcome last seen of each child (by UID), and the one a relist is building.
#[derive(Default)]
struct Seen {
    last: HashMap<String, u64>,
    relisting: Option<HashMap<String, u64>>,
}

impl Seen {
    /// The child to look at for `ev`, if its outcome is new or it is gone.
    fn pass(&mut self, ev: watcher::Event<RawFlow>) -> Option<RawFlow> {
        let uid = |c: &RawFlow| c.metadata.uid.clone().unwrap_or_default();
        match ev {
            watcher::Event::Init => {
                self.relisting = Some(HashMap::new());
                None
            }
            watcher::Event::InitApply(c) => {
                let h = child_outcome(&c);
                let fresh = self.last.get(&uid(&c)) != Some(&h);
                self.relisting.get_or_insert_default().insert(uid(&c), h);
                (fresh && !unreported(&c)).then_some(c)
            }
            // Children deleted while the watch was down are forgotten with the old list.
            watcher::Event::InitDone => {
                self.last = self.relisting.take().unwrap_or_default();
                None
            }
            watcher::Event::Apply(c) => {
                let h = child_outcome(&c);
                (self.last.insert(uid(&c), h) != Some(h) && !unreported(&c)).then_some(c)
            }
            watcher::Event::Delete(c) => {
                self.last.remove(&uid(&c));
                Some(c)
            }
        }
    }
}

/// A child its bound flow has just made (or remade): no status yet, not being deleted. The
/// bound flow knows all there is to know of it; its first status write says more.
fn unreported(child: &RawFlow) -> bool {
    child.status.is_none() && child.metadata.deletion_timestamp.is_none()
}

/// What a bound flow reads of its child: the child's own intent (as [`flow_intent`]) and its
/// run's phase, message and last run time (what the bound flow sums up and writes back), not
/// the rest of its status (per-step progress, timings).
fn child_outcome(child: &RawFlow) -> u64 {
    let mut h = DefaultHasher::new();
    add_metadata_intent(&child.metadata, &mut h);
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
            with(&["metadata", "annotations", "ops.example.com/run"], json!("x")),
            with(&["metadata", "labels"], json!({"l": "v"})),
            with(&["metadata", "finalizers"], json!(["ops.example.com/on-delete"])),
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
    fn a_child_wakes_its_bound_flow_when_its_run_phase_message_or_time_changes_not_its_steps() {
        let before = child_outcome(&flow(base()));
        let steps = with(&["status", "steps", "a", "phase"], json!("Succeeded"));
        assert_eq!(child_outcome(&steps), before);
        for changed in [
            with(&["status", "phase"], json!("Succeeded")),
            with(&["status", "message"], json!("other")),
            with(&["status", "lastRunTime"], json!("2026-11-26T00:00:00Z")),
            with(&["metadata", "generation"], json!(2)),
            with(
                &["metadata", "deletionTimestamp"],
                json!("2026-11-26T00:00:00Z"),
            ),
        ] {
            assert_ne!(child_outcome(&changed), before);
        }
    }

    #[test]
    fn a_childs_repeated_outcome_is_dropped_but_its_deletion_and_a_relist_change_pass() {
        use watcher::Event::*;
        let mut seen = Seen::default();
        let running = || flow(base());
        let done = || with(&["status", "phase"], json!("Succeeded"));
        let steps = || with(&["status", "steps", "a", "phase"], json!("Failed"));
        let mut made = flow(base());
        made.status = None;
        assert!(seen.pass(Apply(made.clone())).is_none(), "just made");
        made.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(seen.pass(Apply(made)).is_some(), "deleted before it ran");
        assert!(seen.pass(Apply(running())).is_some(), "first status");
        assert!(seen.pass(Apply(steps())).is_none(), "step progress only");
        assert!(seen.pass(Apply(done())).is_some(), "the run ended");
        assert!(seen.pass(Delete(done())).is_some(), "deleted, unchanged");
        assert!(seen.pass(Apply(done())).is_some(), "made again after");
        // A relist: unchanged children are dropped, changed ones pass.
        assert!(seen.pass(Init).is_none());
        assert!(seen.pass(InitApply(done())).is_none());
        assert!(seen.pass(InitDone).is_none());
        assert!(seen.pass(Apply(running())).is_some());
    }
}
