//! The reconcile of a bound flow (the parent): it runs no steps itself. It opens the binding as
//! its ServiceAccount (the kind exists, the account has the rights, the watch runs), keeps one
//! child flow and one finalizer per matching object, follows deleted objects through their
//! child's `onDelete` to the removal of the finalizer, and summarises its objects in its status.
//! Deleted (or no longer bound), it lets its objects go: see [`release()`].

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use pseudoflow_crd::bind::{Bind, BindRecord, BIND_FINALIZER};
use pseudoflow_crd::selector::Selector;
use pseudoflow_crd::status::BoundSummary;
use pseudoflow_crd::PseudoFlowSpec;

use super::child::Parent;
use super::in_object;
use super::pending::Pass;
use super::revision;
use super::rollout;
use super::summary::{self, Refused};
use super::Binder;
use crate::flow::events::EventType;
use crate::flow::{finalizer, Error, Reconciling};

mod changed;
mod children;
mod full_pass;
mod open;
mod own_status;
mod related_now;
mod release;
mod serve_child;
mod serve_in_object;

use own_status::{refused, summarise};
pub(crate) use release::release;

/// How often a bound flow looks at all its objects even if no watch event came (a missed event,
/// rights granted since a refusal).
const RESYNC: Duration = Duration::from_secs(300);
/// How soon an object that could not be served is tried again.
const RETRY_OBJECT: Duration = Duration::from_secs(10);
/// Objects one bound flow's reconcile serves at once (creating or updating their flows,
/// finalizers and claims): enough to keep up with a burst of new objects, few enough that one
/// bound flow does not crowd the API server for the others.
const OBJECTS_SERVED_AT_ONCE: usize = 8;
/// How soon a refused binding is tried again.
const RETRY_REFUSED: Duration = Duration::from_secs(30);

/// One reconcile of a bound flow.
pub(crate) async fn reconcile_parent(
    r: &Reconciling<'_, Binder>,
    spec: &PseudoFlowSpec,
) -> Result<Action, Error> {
    let (flows, previous, deleting) = (&r.flows, &r.previous, r.deleting);
    let Some(bind) = spec.bind.as_ref().filter(|_| !deleting) else {
        release(r).await?;
        return Ok(Action::await_change());
    };
    finalizer::set_named(flows, r.flow, BIND_FINALIZER, true).await?;
    let mut binding = match Binding::open(r, flows, spec, bind).await {
        Ok(b) => b,
        Err(message) => {
            refused(r, flows, previous, &message).await?;
            return Ok(Action::requeue(RETRY_REFUSED));
        }
    };
    // Made before any object is served with it (so every record names a kept revision).
    let mut history = revision::history::current(r).await;
    if bind.record != Some(BindRecord::Object) {
        // Switched to children: no object's run goes on in memory.
        r.own.object_runs.stop_flow(r.uid);
    }
    if bind.record == Some(BindRecord::Object) && in_object::deleted::has_on_delete(&r.raw_spec) {
        // Before any object carries its finalizer: what its release lists.
        in_object::release::note(r, &binding.finalizes).await?;
    }
    let pending = &r.own.watches.pending;
    let generation = r.flow.metadata.generation.unwrap_or(0);
    let pass = pending.take(r.uid, generation);
    // Which revision serves each object.
    let accepted = rollout_action(r, &history);
    binding.assign = rollout_plan(r, bind, &history, accepted.as_ref());
    let (again, summary_due) = match pass {
        Pass::Full => match binding.serve_all(generation).await? {
            Ok(again) => {
                pending.summarised(r.uid);
                (again, Ok(()))
            }
            Err(message) => {
                refused(r, flows, previous, &message).await?;
                return Ok(Action::requeue(RETRY_REFUSED));
            }
        },
        Pass::Changed(mut objects) => {
            // And the failed objects (recorded in themselves) whose retry is due, and those
            // the rollout's waves reached that their new revision does not serve yet.
            objects.extend(in_object::retries_due(r));
            if let Some(a) = &binding.assign {
                let records = rollout_records(r, bind).unwrap_or_default();
                objects.extend(a.plan.due(&records).into_iter().map(split_key));
            }
            (
                binding.serve_changed(objects).await,
                pending.summary_due(r.uid),
            )
        }
    };
    let again = again.min(in_object::next_retry(r));
    if let Err(wait) = summary_due {
        // Summed up less than a second ago: a later reconcile does it.
        return Ok(Action::requeue(again.min(wait)));
    }
    let (s, by_revision) = binding.sum_up().await?;
    let mut s = revision::counted(s, &history, &by_revision);
    s.record = bind.record;
    let (rollout, again) = tell_rollout(r, bind, &history, accepted.as_ref(), again).await;
    s.rollout = rollout;
    summarise(r, flows, previous, &bind.kind, s).await?;
    revision::history::prune(r, &mut history, &by_revision).await;
    Ok(Action::requeue(again))
}

/// The rollout as this reconcile's serves left it: its status, told in an Event when it moved
/// ([`rollout::report::event`]), and how soon to look again (`again`, or sooner: objects the
/// waves reached that no serve knew of yet, or the end of a `minReadySeconds`).
async fn tell_rollout(
    r: &Reconciling<'_, Binder>,
    bind: &Bind,
    history: &revision::history::History,
    accepted: Option<&rollout::control::Accepted>,
    mut again: Duration,
) -> (Option<pseudoflow_crd::status::RolloutStatus>, Duration) {
    let Some(a) = rollout_plan(r, bind, history, accepted) else {
        return (None, again);
    };
    let told = rollout::status(&a, r.flow_id.name, history, accepted);
    let before = &r.previous["bound"]["rollout"];
    if let Some((warning, reason, note)) = rollout::report::event(before, &told, a.waved) {
        let ty = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        r.publish(ty, reason, &note).await;
    }
    let records = rollout_records(r, bind).unwrap_or_default();
    // Not for objects that cannot be served (tried again with the others' retries) nor while
    // the flow is suspended (no run starts): looked at every second, they would be read as
    // often.
    let refused = r.own.watches.pending.refused(r.uid);
    let suspended = r.raw_spec["suspend"] == serde_json::Value::Bool(true);
    let due = a.plan.due(&records);
    if !suspended && due.iter().any(|k| !refused.contains_key(*k)) {
        again = again.min(RETRY_DUE);
    }
    if let Some(at) = a.plan.recheck_at {
        let wait = u64::try_from(at - r.now).unwrap_or(0).max(1);
        again = again.min(Duration::from_secs(wait));
    }
    (Some(told), again)
}

/// How soon objects a rollout's wave reached, not served yet, are served.
const RETRY_DUE: Duration = Duration::from_secs(1);

/// The action a person asked for on the flow's rollout, if accepted ([`rollout::control`]).
fn rollout_action(
    r: &Reconciling<'_, Binder>,
    history: &revision::history::History,
) -> Option<rollout::control::Accepted> {
    let annotations = r.flow.metadata.annotations.clone().unwrap_or_default();
    // The key that verifies the webhook's stamp (without it, nothing is accepted).
    let key = r.own.approval_key.as_ref();
    rollout::action(key, (r.ns(), r.flow_id.name), &annotations, history)
}

/// The plan of the flow's rollout from what this process knows of its objects' records (None:
/// no revision kept).
fn rollout_plan(
    r: &Reconciling<'_, Binder>,
    bind: &Bind,
    history: &revision::history::History,
    accepted: Option<&rollout::control::Accepted>,
) -> Option<rollout::Assign> {
    let records = rollout_records(r, bind);
    let known = r.own.watches.pending.passed(r.uid) && records.is_some();
    let records = records.unwrap_or_default();
    let action = accepted.map(|a| a.action);
    rollout::assign(&r.raw_spec, history, &records, known, action, r.now)
}

/// The objects' records as this process knows them: what the serves of a flow recorded in its
/// objects saw, or the children its last summary listed (None: not listed yet).
fn rollout_records(r: &Reconciling<'_, Binder>, bind: &Bind) -> Option<Vec<rollout::plan::Record>> {
    match bind.record {
        Some(BindRecord::Object) => Some(r.own.outcomes.records(r.uid)),
        _ => r.own.child_records.get(r.uid),
    }
}

/// (namespace, name) of object key `key` (`namespace/name`, or a cluster-scoped `name`).
fn split_key(key: &str) -> (String, String) {
    match key.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (String::new(), key.to_string()),
    }
}

/// A bound flow's binding, opened for one reconcile.
struct Binding<'a> {
    r: &'a Reconciling<'a, Binder>,
    bind: &'a Bind,
    /// The bound flow's flows API (its namespace), for its children.
    flows: &'a Api<DynamicObject>,
    /// The objects of the kind, as the flow's ServiceAccount.
    objects: Api<DynamicObject>,
    ar: ApiResource,
    selector: Selector,
    finalizer: String,
    /// The annotation each object names its child's UID by ([`claim`](super::claim)).
    mark: String,
    /// The related kinds (`bind.related`) by (apiVersion, kind): their resource and whether it
    /// is namespaced, discovered as the flow's ServiceAccount.
    related_kinds: BTreeMap<(String, String), (ApiResource, bool)>,
    /// Where its objects are, for a flow recorded in them that finalizes them.
    finalizes: in_object::release::Finalizes,
    /// The rollout of its revision: which revision serves each object.
    assign: Option<rollout::Assign>,
    /// The objects a full pass listed (`namespace/name`).
    listed: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Binding<'_> {
    /// Whether the object is being deleted or no longer matches the selector.
    fn leaving(&self, meta: &ObjectMeta) -> bool {
        let labels = meta.labels.clone().unwrap_or_default();
        meta.deletion_timestamp.is_some() || !self.selector.matches(&labels)
    }

    /// The flow's objects summed up (counted by phase, the latest failures, those refused),
    /// and counted per revision hash.
    async fn sum_up(&self) -> Result<(BoundSummary, BTreeMap<String, u32>), Error> {
        let r = self.r;
        let refused: Vec<(String, String)> =
            r.own.watches.pending.refused(r.uid).into_iter().collect();
        if self.bind.record == Some(BindRecord::Object) {
            // No child to count: what its serves saw (bind/in_object/outcomes.rs).
            let s = r.own.outcomes.summary(r.uid, &refused);
            return Ok((s, r.own.outcomes.by_revision(r.uid)));
        }
        let refusals: Vec<Refused> = refused
            .into_iter()
            .map(|(object, message)| Refused { object, message })
            .collect();
        let states = self.child_states().await?;
        let records = rollout::children::records(&states);
        r.own.child_records.put(r.uid, records);
        let named: Vec<(String, &DynamicObject)> =
            states.iter().map(|(o, c)| (o.clone(), c)).collect();
        Ok((
            summary::summarise(&named, &refusals),
            summary::by_revision(&named),
        ))
    }

    fn parent(&self) -> Parent<'_> {
        Parent::of(self.r)
    }

    /// The objects' API for `obj`'s namespace.
    fn objects_api(&self, obj: &DynamicObject) -> Api<DynamicObject> {
        match &obj.metadata.namespace {
            Some(ns) => Api::namespaced_with(self.objects.clone().into_client(), ns, &self.ar),
            None => self.objects.clone(),
        }
    }
}
