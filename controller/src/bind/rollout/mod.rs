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
use std::sync::Arc;

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
#[derive(Debug, Clone)]
pub struct Assign {
    /// The plan.
    pub plan: Plan,
    /// Whether the flow rolls out in waves (then the flow's change alone runs no object whose
    /// revision stays).
    pub waved: bool,
    /// The current revision's hash.
    current: String,
    /// The kept revisions' data, by hash.
    data: BTreeMap<String, Arc<Value>>,
    /// The flow's spec as it is now.
    spec: Arc<Value>,
}

impl Assign {
    /// The revision object `key` is served with, its record naming `recorded`.
    pub fn with(&self, key: &str, recorded: Option<&str>) -> With {
        let kept = |h: &str| h == self.current || self.data.contains_key(h);
        let hash = self.plan.revision_for(key, recorded, kept);
        let spec = (hash != self.current)
            .then(|| {
                self.data
                    .get(&hash)
                    .map(|d| Arc::new(spec_of(d, &self.spec)))
            })
            .flatten();
        if hash != self.current && spec.is_none() {
            // Not kept after all: the flow's own.
            return With {
                hash: self.current.clone(),
                spec: None,
            };
        }
        With { hash, spec }
    }
}

/// The flow's spec as revision `data` had it: its `data.spec`, with what picks the objects
/// (`bind.selector`, `bind.allNamespaces`) and `suspend` as the flow (`now`) has them.
pub fn spec_of(data: &Value, now: &Value) -> Value {
    let mut spec = data["spec"].clone();
    if let Some(s) = spec.as_object_mut() {
        if let Some(v) = now.get("suspend") {
            s.insert("suspend".into(), v.clone());
        }
    }
    if let Some(b) = spec.get_mut("bind").and_then(Value::as_object_mut) {
        for k in ["selector", "allNamespaces"] {
            if let Some(v) = now["bind"].get(k) {
                b.insert(k.into(), v.clone());
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
    Some(Assign {
        plan: plan::plan(&input),
        waved: !rollout.waves.is_empty(),
        current: current.hash.clone(),
        data: history.data.clone(),
        spec: Arc::new(spec.clone()),
    })
}

/// The action a person asked for on the rollout of flow `ns/name` (its `annotations`): one
/// stamped for its current revision, or for the previous one (what the status names after an
/// undo). The key that verifies the stamp is helper `control`'s to give (None until then).
pub fn action(
    (ns, name): (&str, &str),
    annotations: &BTreeMap<String, String>,
    history: &History,
) -> Option<control::Accepted> {
    let names = [history.current(), history.previous()];
    names
        .into_iter()
        .flatten()
        .find_map(|rev| control::accepted(None, (ns, name), annotations, &rev.name))
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
    let max = rollout_of(&a.spec).failures_allowed();
    let mut s = report::status(&a.plan, name, max);
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
}
