//! Flows bound to a kind (`spec.bind`, docs/bound-flows.md): one flow serves every object of a
//! kind, as a hand-written operator would. Rather than a second run engine, the bound flow (the
//! *parent*) keeps one ordinary flow per object (its *child*): the child reuses everything a flow
//! has (runs, `concurrencyPolicy`, status, `onDelete`, metrics) and sees the object as the
//! variable `object`.
//!
//! - [`parent`]: the parent's reconcile: watch the kind, keep a child per object, a finalizer on
//!   each object, and a summary in the parent's status.
//! - [`child`]: what a child is (its name, its spec, and which change of an object starts a run).
//! - [`claim`]: whether a flow under a child's name is this flow's for the object (the object
//!   names its child's UID), so a planted flow is never adopted.
//! - [`object`]: what a child sees of an object, and the finalizer the parent puts on it.
//! - [`related`]: other objects each object names (`bind.related`), whose changes start runs.
//! - [`access`]: the rights the flow's ServiceAccount needs on the kind, checked before watching
//!   (everything done to objects of the kind is done as that account: [`crate::flow::accounts`]).
//! - [`watch`]: one watch per bound flow, waking the parent when an object changes.
//! - [`watched`]: what a watch decodes of an object (its metadata, without managed fields).
//! - [`write_back`]: the object's status, written after each reconcile of its child (by the
//!   dispatch, [`crate::serve`]).
//! - [`summary`]: the parent's bounded status.
//! - [`pages`]: the objects and children listed a page at a time, each cut to what is read.
//! - [`decode`]: each object decoded alone, so one too deep or too large fails alone.
//! - [`in_object`]: a flow recorded in its objects (`bind.record: Object`): no child, each
//!   object's steps run in the controller's memory and its result recorded in the object.
//! - [`pending`]: which objects changed since the parent last served them (served alone).
//! - [`revision`]: the flow's revisions (ControllerRevisions), and its objects per revision.
//! - [`served`]: the served mark of a flow recorded in its objects (`bind.record: Object`),
//!   from which the next serve computes `trigger`.

pub mod access;
pub mod child;
pub mod claim;
pub mod decode;
pub mod in_object;
pub mod object;
pub mod pages;
pub mod parent;
pub mod pending;
pub mod related;
pub mod revision;
pub mod rollout;
pub mod served;
pub mod summary;
pub mod watch;
pub mod watched;
pub mod write_back;

use std::collections::HashMap;
use std::sync::Mutex;

pub(crate) use parent::{reconcile_parent, release};

/// Why one object of a bound flow cannot be served (its flow cannot be made or compiled, a
/// reference does not render, a child of its name is not the flow's): listed among the flow's
/// failures (`status.bound`) and tried again at its next pass, never an error of the reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotServed(pub String);

impl std::fmt::Display for NotServed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What serving one object came to: served (`None`), refused (why), or an error of the
/// reconcile (the object is tried again soon).
pub type Served = Result<Option<NotServed>, crate::flow::Error>;
pub(crate) use write_back::write_back;

/// What the bound-flow reconciler keeps across reconciles: the watches of bound kinds, the
/// object statuses last written and the related objects last looked at. (The clients acting as a
/// flow's ServiceAccount are shared with plain flows: [`crate::flow::accounts`].)
#[derive(Default)]
pub struct Binder {
    /// One watch per bound flow.
    pub watches: watch::Watches,
    /// The API steps of flows recorded in their objects, run in the controller (with the
    /// plain flows' turns: [`crate::in_controller::InControllerSteps::sharing_turns`]).
    pub in_controller: crate::in_controller::InControllerSteps,
    /// What the serves of flows recorded in their objects saw, for their summaries.
    pub outcomes: in_object::outcomes::Outcomes,
    /// The runs of objects of flows recorded in them, each in a task of its own.
    pub object_runs: in_object::tasks::Tasks,
    /// Each bound flow's revisions as last read (so an unchanged flow reads none).
    pub revisions: revision::history::Histories,
    /// Checks the webhook's rollout stamps ([`rollout::control`]); without it no `kubectl pf
    /// rollout` action is accepted (the plain flows' approval key: [`crate::Context`]).
    pub approval_key: Option<crate::approval::Key>,
    /// The child flows of each bound flow recorded in them, as a rollout plans from them.
    pub child_records: rollout::children::Kept,
    /// Per child flow uid: a digest of the object status it last wrote, so an unchanged status is
    /// not written again (lost on restart: then it is written once more, harmlessly).
    written: Mutex<HashMap<String, u64>>,
    /// Per `<bound flow uid>/<child>/<related key>` (and `<bound flow uid>/object/<namespace>/<name>/<related
    /// key>` when recorded in the object): what that related object was when
    /// last looked at (its content only as a digest, never kept in any object).
    related: Mutex<HashMap<String, related::RelatedSeen>>,
}

impl Binder {
    /// A binder whose objects' steps take the same turns as `steps` (the plain flows').
    pub fn sharing_turns(steps: &crate::in_controller::InControllerSteps) -> Binder {
        Binder {
            in_controller: steps.sharing_turns(),
            ..Default::default()
        }
    }

    /// What a related object was when last looked at (see [`related::changed`]).
    pub fn remembered(&self, key: &str) -> Option<related::RelatedSeen> {
        self.related.lock().expect("not poisoned").get(key).cloned()
    }

    /// Remembers what a related object is now.
    pub fn remember(&self, key: String, seen: related::RelatedSeen) {
        self.related.lock().expect("not poisoned").insert(key, seen);
    }

    /// Forgets every related object remembered under `prefix` (a child, or a bound flow).
    pub fn forget(&self, prefix: &str) {
        let mut map = self.related.lock().expect("not poisoned");
        map.retain(|k, _| !k.starts_with(prefix));
    }
}
