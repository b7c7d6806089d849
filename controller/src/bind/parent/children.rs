//! A bound flow's child flows (`bind.record: Child`): listing those it owns, and picking the
//! one that serves an object (its own, an older controller's to take over, or a foreign one
//! refused).

use std::collections::BTreeMap;

use kube::api::{DynamicObject, ListParams};
use pseudoflow_crd::bind::BOUND_TO_LABEL;

use super::Binding;
use crate::bind::claim::{self, Standing};
use crate::bind::{child, pages};
use crate::flow::Error;

impl Binding<'_> {
    /// The child flows of this bound flow (labelled, and claiming to be owned by it), by name,
    /// and those not under their object's name (made by an older controller) by object UID.
    pub(super) async fn children(&self) -> Result<Children, Error> {
        let uid = self.r.uid;
        let children = pages::list_kept(self.flows, &children_of(self.r.flow_id.name), |c| {
            owned_by(&c, uid).then(|| pages::slim_child(c))
        })
        .await?;
        let mut out = Children::default();
        for c in children {
            let name = c.metadata.name.clone().unwrap_or_default();
            let obj = &c.data["spec"]["bound"]["object"]["metadata"];
            let ns = obj["namespace"].as_str().unwrap_or_default();
            let expected = child::child_name(
                self.r.flow_id.name,
                ns,
                obj["name"].as_str().unwrap_or_default(),
            );
            if let (false, Some(obj_uid)) = (expected == name, claim::recorded_uid(&c)) {
                out.old.insert(obj_uid.to_string(), name.clone());
            }
            out.by_name.insert(name, c);
        }
        Ok(out)
    }

    /// The child serving `obj` (this flow's, or an older controller's to take over once), or
    /// why the flow under its name is not adopted.
    pub(super) fn pick<'c>(&self, obj: &DynamicObject, children: &'c Children) -> Picked<'c> {
        let obj_ns = obj.metadata.namespace.as_deref().unwrap_or_default();
        let obj_name = obj.metadata.name.as_deref().unwrap_or_default();
        let name = child::child_name(self.r.flow_id.name, obj_ns, obj_name);
        let (mark, fin) = (&self.mark, &self.finalizer);
        if let Some(c) = children.by_name.get(&name) {
            return match claim::standing(c, obj, mark, fin) {
                Standing::Ours | Standing::Legacy => Picked::Child(c),
                Standing::Foreign(why) => Picked::Foreign(why),
            };
        }
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        let old = children.old.get(uid).and_then(|n| children.by_name.get(n));
        match old.filter(|c| claim::standing(c, obj, mark, fin) == Standing::Legacy) {
            Some(c) => Picked::Old(c),
            None => Picked::None,
        }
    }

    /// Each child flow's object and its run's state: all that summing up reads.
    pub(super) async fn child_states(&self) -> Result<Vec<(String, DynamicObject)>, Error> {
        let uid = self.r.uid;
        let states = pages::list_kept(self.flows, &children_of(self.r.flow_id.name), |c| {
            owned_by(&c, uid).then(|| pages::child_state(c))
        })
        .await?;
        Ok(states)
    }
}

/// A bound flow's child flows, as listed at the start of a reconcile.
#[derive(Default)]
pub(super) struct Children {
    /// By name.
    pub(super) by_name: BTreeMap<String, DynamicObject>,
    /// The names of those not under their object's child name (made before child names were
    /// collision-resistant), by the UID of the object they record.
    pub(super) old: BTreeMap<String, String>,
}

/// Which child serves an object.
pub(super) enum Picked<'c> {
    /// The flow under its name, this flow's for it.
    Child(&'c DynamicObject),
    /// None under its name; one an older controller made for it, to take over once.
    Old(&'c DynamicObject),
    /// None.
    None,
    /// A flow under its name that is not this flow's for it: why.
    Foreign(String),
}

/// Selects the child flows of bound flow `parent` (each still checked for its owner).
pub(super) fn children_of(parent: &str) -> ListParams {
    let label = format!(
        "{BOUND_TO_LABEL}={}",
        pseudoflow_compiler::names::label_value(parent)
    );
    ListParams::default().labels(&label)
}

pub(super) fn owned_by(c: &DynamicObject, uid: &str) -> bool {
    c.metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|o| o.uid == uid && o.controller == Some(true)))
}
