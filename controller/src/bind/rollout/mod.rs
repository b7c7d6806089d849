//! Rolling a bound flow's new revision out to its objects (issue #44, docs/bound-flows.md#rollouts):
//! in waves, stopping on failures, with pause, resume, promote and undo asked for by a person
//! (docs/decisions.md#rolling-a-bound-flows-revision-out-in-waves).
//!
//! - [`plan`]: which objects the new revision serves now, derived from the objects' records
//!   (pure), so nothing of a rollout lives only in memory.
//! - [`report`]: the plan told in `status.bound.rollout` and in Events.
//! - [`control`]: the action a person asked for (the webhook's stamp).
//! - [`children`]: the records of a flow recorded in child flows.
//!
//! Here: the plan of one reconcile ([`Assign`]), and the revision each object is served with
//! ([`With`]): the target if the waves reached it, else the revision that last served it, whose
//! spec is rebuilt from its ControllerRevision's `data`.

pub mod children;
pub mod control;
pub mod plan;
pub mod report;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use pseudoflow_crd::rollout::{Rollout, RolloutAction};
use pseudoflow_crd::status::RolloutStatus;
use serde_json::Value;

use super::revision::{self, history::History};
use plan::{Plan, Record};

/// The revision one object is served with: its hash, and its spec when it is not the flow's
/// spec as it is now (None: the flow's own).
#[derive(Debug, Clone, PartialEq)]
pub struct With {
    /// The revision's hash (what the object's record then names).
    pub hash: String,
    /// The flow's spec as that revision had it (bind's selector as the flow's is now).
    pub spec: Option<Arc<Value>>,
}

/// A bound flow's rollout for one reconcile: its plan, and the specs of the revisions it
/// serves objects with.
#[derive(Debug)]
pub struct Assign {
    /// The plan.
    pub plan: Plan,
    /// Whether the flow rolls out in waves (then the flow's change alone runs no object whose
    /// revision stays).
    pub waved: bool,
    /// `maxFailures`, as the status says it.
    max_failures: u32,
    /// The current revision's hash.
    current: String,
    /// The kept revisions' data, by hash (shared with the history).
    data: BTreeMap<String, Arc<Value>>,
    /// What of the flow's spec now an older revision's spec takes ([`spec_of`]).
    now: Value,
    /// The specs of older revisions made so far this reconcile, by hash: each made once,
    /// shared by the objects it serves.
    made: Mutex<BTreeMap<String, Arc<Value>>>,
}

impl Assign {
    /// The revision object `key` is served with, its record naming `recorded`.
    pub fn with(&self, key: &str, recorded: Option<&str>) -> With {
        let kept = |h: &str| h == self.current || self.data.contains_key(h);
        let hash = self.plan.revision_for(key, recorded, kept);
        if hash == self.current {
            return With { hash, spec: None };
        }
        let Some(data) = self.data.get(&hash) else {
            // Not kept after all: the flow's own.
            let hash = self.current.clone();
            return With { hash, spec: None };
        };
        let mut made = self.made.lock().expect("not poisoned");
        let spec = made
            .entry(hash.clone())
            .or_insert_with(|| Arc::new(spec_of(data, &self.now)))
            .clone();
        With {
            hash,
            spec: Some(spec),
        }
    }
}

/// The flow's spec as revision `data` had it: its `data.spec`, with what picks the objects
/// (`bind.selector`, `bind.allNamespaces`) and `suspend` as the flow (`now`) has them.
pub fn spec_of(data: &Value, now: &Value) -> Value {
    let mut spec = data["spec"].clone();
    let given = |v: &Value| (!v.is_null()).then(|| v.clone());
    if let (Some(s), Some(v)) = (spec.as_object_mut(), given(&now["suspend"])) {
        s.insert("suspend".into(), v);
    }
    if let Some(b) = spec.get_mut("bind").and_then(Value::as_object_mut) {
        for k in ["selector", "allNamespaces"] {
            if let Some(v) = given(&now["bind"][k]) {
                b.insert(k.into(), v);
            }
        }
    }
    spec
}

/// The flow's `spec.rollout` (its default when absent or unreadable).
pub fn rollout_of(spec: &Value) -> Rollout {
    let r = spec.get("rollout").cloned().unwrap_or_default();
    serde_json::from_value(r).unwrap_or_default()
}

/// The plan of the rollout of flow `spec`'s current revision (None: no revision is kept, so
/// every object is served with the flow's spec as always) from its objects' `records`;
/// `known`: whether they are all its objects; `action`: as [`action`] found it.
pub fn assign(
    spec: &Value,
    history: &History,
    records: &[Record],
    known: bool,
    action: Option<RolloutAction>,
    now: i64,
) -> Option<Assign> {
    let current = history.current()?;
    let rollout = rollout_of(spec);
    let previous = history.previous().map(|p| p.hash.as_str());
    let input = plan::Input {
        objects: records,
        known,
        current: &current.hash,
        previous,
        rollout: &rollout,
        action,
        now,
    };
    let now = serde_json::json!({
        "suspend": spec["suspend"],
        "bind": {"selector": spec["bind"]["selector"], "allNamespaces": spec["bind"]["allNamespaces"]},
    });
    Some(Assign {
        plan: plan::plan(&input),
        waved: !rollout.waves.is_empty(),
        max_failures: rollout.failures_allowed(),
        current: current.hash.clone(),
        data: history.data.clone(),
        now,
        made: Mutex::default(),
    })
}

/// The action a person asked for on the rollout of flow `ns/name` (its `annotations`), its
/// stamp verified with `key`: one stamped for its current revision, or for the previous one
/// (what the status names after an undo).
pub fn action(
    key: Option<&crate::approval::Key>,
    (ns, name): (&str, &str),
    annotations: &BTreeMap<String, String>,
    history: &History,
) -> Option<control::Accepted> {
    let names = [history.current(), history.previous()];
    names
        .into_iter()
        .flatten()
        .find_map(|rev| control::accepted(key, (ns, name), annotations, &rev.name))
}

/// The status of the rollout `a` plans, for flow `flow` with `history`.
pub fn status(
    a: &Assign,
    flow: &str,
    history: &History,
    accepted: Option<&control::Accepted>,
) -> RolloutStatus {
    let name = |h: &str| {
        history
            .by_hash(h)
            .map(|r| r.name.clone())
            .unwrap_or_else(|| revision::name(flow, h))
    };
    let mut s = report::status(&a.plan, name, a.max_failures);
    s.last_action = accepted.map(|x| pseudoflow_crd::status::RolloutActionRecord {
        action: x.action,
        user: x.user.clone(),
        time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_millisecond(x.time_ms).unwrap_or_default(),
        ),
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_old_revisions_spec_is_its_data_with_the_flows_selector_now() {
        let now = json!({"suspend": true, "steps": [{"type": "log", "message": "new"}],
            "bind": {"kind": "Widget", "selector": "tier=prod", "allNamespaces": true}});
        let old = revision::data(&json!({"steps": [{"type": "log", "message": "old"}],
            "bind": {"kind": "Widget", "selector": "tier=dev"}, "rollout": {"waves": [1]}}));
        let s = spec_of(&old, &now);
        assert_eq!(s["steps"][0]["message"], "old");
        assert_eq!(s["bind"]["selector"], "tier=prod");
        assert_eq!(s["bind"]["allNamespaces"], true);
        assert_eq!(s["suspend"], true);
        assert!(s.get("rollout").is_none());
        assert_eq!(
            revision::hash(&s),
            revision::hash_of_data(&old),
            "the same revision"
        );
    }

    #[test]
    fn an_object_not_reached_is_served_with_its_own_revisions_spec_made_once() {
        let now = json!({"steps": [{"type": "log", "message": "new"}],
            "bind": {"kind": "Widget", "selector": "tier=prod"}, "rollout": {"waves": [1]}});
        let old_spec = json!({"steps": [{"type": "log", "message": "old"}],
            "bind": {"kind": "Widget"}});
        let (old, new) = (revision::hash(&old_spec), revision::hash(&now));
        let rev = |hash: &str, number| revision::history::Revision {
            name: revision::name("widgets", hash),
            number,
            hash: hash.into(),
            uid: format!("u{number}"),
        };
        let mut history = History::default();
        history.current = Some(new.clone());
        history.all = vec![rev(&old, 1), rev(&new, 2)];
        history.data = [(old.clone(), Arc::new(revision::data(&old_spec)))].into();
        let records: Vec<Record> = ["ns/a", "ns/b"]
            .iter()
            .map(|k| Record {
                key: k.to_string(),
                revision: Some(old.clone()),
                state: plan::LatestRun::Ready(0),
            })
            .collect();
        let a = assign(&now, &history, &records, true, None, 100).unwrap();
        assert_eq!(
            a.with("ns/a", Some(&old)),
            With {
                hash: new.clone(),
                spec: None
            }
        );
        let b = a.with("ns/b", Some(&old));
        assert_eq!(b.hash, old);
        let spec = b.spec.clone().unwrap();
        assert_eq!(spec["steps"][0]["message"], "old");
        assert_eq!(spec["bind"]["selector"], "tier=prod");
        assert!(
            Arc::ptr_eq(&spec, &a.with("ns/c", None).spec.unwrap()),
            "made once"
        );
        // A revision no longer kept: the previous one (here, the same old one).
        assert_eq!(a.with("ns/d", Some("gone")).hash, old);
        let s = status(&a, "widgets", &history, None);
        assert_eq!(
            (s.revision, s.from),
            (rev(&new, 2).name, Some(rev(&old, 1).name))
        );
    }
}
