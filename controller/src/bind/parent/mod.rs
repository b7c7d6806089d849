//! The reconcile of a bound flow (the parent): it runs no steps itself. It opens the binding as
//! its ServiceAccount (the kind exists, the account has the rights, the watch runs), keeps one
//! child flow and one finalizer per matching object, follows deleted objects through their
//! child's `onDelete` to the removal of the finalizer, and summarises its objects in its status.
//! Deleted (or no longer bound), it lets its objects go: see [`release()`].

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use pseudoflow_crd::bind::{Bind, BindRecord, BIND_FINALIZER};
use pseudoflow_crd::selector::Selector;
use pseudoflow_crd::PseudoFlowSpec;
use serde_json::{json, Value};
use tracing::info;

use super::child::{self, Parent, FLOW_GENERATION_ANNOTATION};
use super::claim;
use super::pending::Pass;
use super::summary::{self, Refused};
use super::Binder;
use super::{decode, in_object, object, pages};
use crate::flow::events::EventType;
use crate::flow::{finalizer, Error, Reconciling};

mod changed;
mod children;
mod open;
mod own_status;
mod related_now;
mod release;

use children::{Children, Picked};
use own_status::{refused, summarise};
pub(crate) use release::release;
use release::retire;

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
    let binding = match Binding::open(r, flows, spec, bind).await {
        Ok(b) => b,
        Err(message) => {
            refused(r, flows, previous, &message).await?;
            return Ok(Action::requeue(RETRY_REFUSED));
        }
    };
    if bind.record != BindRecord::Object {
        // Switched to children: no object's run goes on in memory.
        r.own.object_runs.stop_flow(r.uid);
    }
    if bind.record == BindRecord::Object && in_object::deleted::has_on_delete(&binding.raw_spec) {
        // Before any object carries its finalizer: what its release lists.
        in_object::release::note(r, &binding.finalizes).await?;
    }
    let pending = &r.own.watches.pending;
    let generation = r.flow.metadata.generation.unwrap_or(0);
    let (again, summary_due) = match pending.take(r.uid, generation) {
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
            // And the failed objects (recorded in themselves) whose retry is due.
            objects.extend(in_object::retries_due(r));
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
    let refused: Vec<(String, String)> = pending.refused(r.uid).into_iter().collect();
    let s = if bind.record == BindRecord::Object {
        // No child to count: what its serves saw (bind/in_object/outcomes.rs).
        r.own.outcomes.summary(r.uid, &refused)
    } else {
        let refusals: Vec<Refused> = refused
            .into_iter()
            .map(|(object, message)| Refused { object, message })
            .collect();
        let states = binding.child_states().await?;
        let named: Vec<(String, &DynamicObject)> =
            states.iter().map(|(o, c)| (o.clone(), c)).collect();
        summary::summarise(&named, &refusals)
    };
    summarise(r, flows, previous, &bind.kind, s).await?;
    Ok(Action::requeue(again))
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
    /// The annotation each object names its child's UID by ([`claim`]).
    mark: String,
    raw_spec: Value,
    /// The related kinds (`bind.related`) by (apiVersion, kind): their resource and whether it
    /// is namespaced, discovered as the flow's ServiceAccount.
    related_kinds: BTreeMap<(String, String), (ApiResource, bool)>,
    /// Where its objects are, for a flow recorded in them that finalizes them.
    finalizes: in_object::release::Finalizes,
}

impl<'a> Binding<'a> {
    /// Serves every object, a page at a time, each decoded alone (one that cannot be, too deep
    /// or too large, is named and skipped, and the others are served); returns how soon to look
    /// again, or why the objects cannot be listed.
    async fn serve_all(&self, generation: i64) -> Result<Result<Duration, String>, Error> {
        let children = self.children().await?;
        let legacy = !children.old.is_empty();
        let mut refusals = BTreeMap::new();
        let mut again = RESYNC;
        let mut token: Option<String> = None;
        loop {
            let lp = ListParams::default();
            let page = match pages::raw_page(&self.objects, &lp, token.as_deref()).await {
                Ok(page) => page,
                Err(e) => return Ok(Err(format!("listing {} objects: {e}", self.bind.kind))),
            };
            // Several objects at once (in order): each is a few API calls of its own, and a
            // kind with hundreds of new objects should not wait for them one after another.
            let mut serving = Vec::with_capacity(page.items.len());
            for (i, raw) in page.items.iter().enumerate() {
                serving.push(self.serve_alone(raw.get(), i, &children));
            }
            let served: Vec<(Option<Refused>, Duration)> = futures::stream::iter(serving)
                .buffered(OBJECTS_SERVED_AT_ONCE)
                .collect()
                .await;
            for (refusal, sooner) in served {
                refusals.extend(refusal.map(|r| (r.object, r.message)));
                again = again.min(sooner);
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                break;
            }
        }
        let pending = &self.r.own.watches.pending;
        pending.full_pass_done(self.r.uid, generation, legacy, refusals);
        if again < RESYNC {
            // An object to try again soon: which one is in no list kept, so all are.
            pending.everything(self.r.uid);
        }
        Ok(Ok(again))
    }

    /// Whether the object is being deleted or no longer matches the selector.
    fn leaving(&self, meta: &ObjectMeta) -> bool {
        let labels = meta.labels.clone().unwrap_or_default();
        meta.deletion_timestamp.is_some() || !self.selector.matches(&labels)
    }

    /// [`Binding::serve_raw`], with how soon this object wants the next look.
    async fn serve_alone(
        &self,
        raw: &str,
        i: usize,
        children: &Children,
    ) -> (Option<Refused>, Duration) {
        let mut again = RESYNC;
        let refusal = self.serve_raw(raw, i, children, &mut again).await;
        (refusal, again)
    }

    /// Decodes item `i` of a page and serves it; returns why it cannot be, if so. One object's
    /// trouble (a conflict, an admission webhook refusing its finalizer) is its own: the others
    /// are served, and it is tried again soon (`again`).
    async fn serve_raw(
        &self,
        raw: &str,
        i: usize,
        children: &Children,
        again: &mut Duration,
    ) -> Option<Refused> {
        let obj = match decode::object(raw, i) {
            Ok(obj) => obj,
            // Deleted (or no longer matching), its metadata is all letting it go reads.
            Err(u) => match u.meta.filter(|m| self.leaving(m)) {
                Some(metadata) => DynamicObject {
                    types: None,
                    metadata: *metadata,
                    data: json!({}),
                },
                None => {
                    let (object, message) = (u.object, u.message);
                    return Some(Refused { object, message });
                }
            },
        };
        let message = match self.serve(&obj, children).await {
            Ok(None) => return None,
            Ok(Some(why)) => why,
            Err(e) => {
                *again = RETRY_OBJECT;
                format!("serving it: {e}")
            }
        };
        let object = object::key(&obj);
        Some(Refused { object, message })
    }

    /// Serves one object; returns why it cannot be served, if so.
    async fn serve(
        &self,
        obj: &DynamicObject,
        children: &Children,
    ) -> Result<Option<String>, Error> {
        let obj_ns = obj.metadata.namespace.as_deref().unwrap_or_default();
        let obj_name = obj.metadata.name.as_deref().unwrap_or_default();
        let name = child::child_name(self.r.flow_id.name, obj_ns, obj_name);
        let leaving = self.leaving(&obj.metadata);
        if self.bind.record == BindRecord::Object {
            return self.serve_in_object(obj, children, leaving).await;
        }
        let (child, old) = match self.pick(obj, children) {
            Picked::Child(c) => (Some(c), None),
            Picked::Old(c) => (None, Some(c)),
            Picked::None => (None, None),
            Picked::Foreign(_) if leaving => (None, None),
            Picked::Foreign(why) => {
                self.r
                    .publish(EventType::Warning, "ChildRefused", &why)
                    .await;
                return Ok(Some(why));
            }
        };
        if leaving {
            self.let_go(obj, child.or(old)).await?;
            return Ok(None);
        }
        let view = object::view(obj);
        let seen = match self.related_now(&view).await? {
            Ok(seen) => seen,
            Err(why) => return Ok(Some(why)),
        };
        let previous = child.or(old).map(|c| &c.data["spec"]["bound"]["object"]);
        let trigger = child::trigger(previous, &view, self.bind);
        let trigger = match child {
            Some(c) => self.with_related(&name, c, trigger, &seen),
            None => trigger,
        };
        let flow_changed = child.is_some_and(|c| {
            let a = c.metadata.annotations.as_ref();
            let g = a.and_then(|a| a.get(FLOW_GENERATION_ANNOTATION));
            g.map(String::as_str) != Some(&self.parent().generation.to_string())
        }) || old.is_some();
        if trigger.is_none() && !flow_changed {
            self.remember(&name, &seen);
            return Ok(None);
        }
        let trigger = trigger.unwrap_or_else(|| json!({"event": "update", "changed": []}));
        let versions: BTreeMap<String, String> = seen
            .iter()
            .map(|(key, s)| (key.clone(), s.version.clone()))
            .collect();
        let made = child::child_flow(
            &self.parent(),
            &name,
            &self.ar.plural,
            &view,
            &trigger,
            &versions,
        );
        let child_uid = match self.write_child(&name, child, made).await? {
            Ok(uid) => uid,
            Err(why) => return Ok(Some(why)),
        };
        self.remember(&name, &seen);
        // Only once its flow exists: an object whose flow was refused keeps no finalizer of ours,
        // and names no child.
        let objects = self.objects_api(obj);
        claim::mark_again_on_conflict(&objects, obj, &self.finalizer, &self.mark, &child_uid)
            .await?;
        if let Some(old) = old {
            retire(self.flows, old.metadata.name.as_deref().unwrap_or_default()).await?;
        }
        Ok(None)
    }

    /// Serves `obj` recorded in the object (`bind.record: Object`, [`in_object`]), after
    /// letting go of what `record: Child` left on it: its child (released: no `onDelete`
    /// runs) and our finalizer.
    async fn serve_in_object(
        &self,
        obj: &DynamicObject,
        children: &Children,
        leaving: bool,
    ) -> Result<Option<String>, Error> {
        if let Picked::Child(c) | Picked::Old(c) = self.pick(obj, children) {
            retire(self.flows, c.metadata.name.as_deref().unwrap_or_default()).await?;
        }
        let serving = in_object::Serving {
            r: self.r,
            bind: self.bind,
            parent: self.parent(),
            plural: &self.ar.plural,
            objects: self.objects_api(obj),
        };
        // Our finalizer holds each object only for the flow's onDelete steps.
        let holds = in_object::deleted::has_on_delete(&self.raw_spec);
        let ours = finalizer::has(obj, &self.finalizer);
        if leaving {
            if ours && holds && obj.metadata.deletion_timestamp.is_some() {
                return serving.serve_deleted(obj, &self.finalizer).await;
            }
            // No longer matching (or nothing to run): let go, no onDelete runs.
            if ours {
                finalizer::set_named(&serving.objects, obj, &self.finalizer, false).await?;
            }
            let gone = object::key(obj);
            self.r.own.outcomes.record(self.r.uid, gone, None);
            return Ok(None);
        }
        if ours != holds {
            finalizer::set_named(&serving.objects, obj, &self.finalizer, holds).await?;
        }
        serving.serve(obj).await
    }

    fn parent(&self) -> Parent<'_> {
        Parent {
            name: self.r.flow_id.name,
            namespace: self.r.ns(),
            uid: self.r.uid,
            generation: self.r.flow.metadata.generation.unwrap_or(0),
            spec: &self.raw_spec,
        }
    }

    /// The objects' API for `obj`'s namespace.
    fn objects_api(&self, obj: &DynamicObject) -> Api<DynamicObject> {
        match &obj.metadata.namespace {
            Some(ns) => Api::namespaced_with(self.objects.clone().into_client(), ns, &self.ar),
            None => self.objects.clone(),
        }
    }

    /// Creates the child, or updates the one it owns, and returns its UID; a flow of that name
    /// it does not own is refused (a tenant may have created it to have it adopted), with an
    /// Event, and why is returned.
    async fn write_child(
        &self,
        name: &str,
        existing: Option<&DynamicObject>,
        mut made: Value,
    ) -> Result<Result<String, String>, Error> {
        let Some(existing) = existing else {
            let flow: DynamicObject = serde_json::from_value(made).expect("a flow object");
            return match self.flows.create(&PostParams::default(), &flow).await {
                Ok(made) => {
                    info!(flow = %self.r.key(), child = name, "made a flow for an object");
                    Ok(Ok(made.metadata.uid.unwrap_or_default()))
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let why = format!(
                        "a PseudoFlow named {name} already exists and is not this flow's; it is \
                         not adopted (delete or rename it to have the object served)"
                    );
                    self.r
                        .publish(EventType::Warning, "ChildRefused", &why)
                        .await;
                    Ok(Err(why))
                }
                Err(e) => Err(e.into()),
            };
        };
        // The whole spec is replaced (a field the bound flow dropped goes too); the rest of the
        // child (its finalizer, status) stays. The resourceVersion read makes the write fail
        // (and the reconcile retry) if the child changed meanwhile.
        let mut updated = existing.clone();
        updated.data["spec"] = made["spec"].take();
        let ours = made["metadata"]["annotations"].as_object().cloned();
        let annotations = updated
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for (k, v) in ours.into_iter().flatten() {
            annotations.insert(k, v.as_str().unwrap_or_default().to_string());
        }
        let written = self
            .flows
            .replace(name, &PostParams::default(), &updated)
            .await?;
        Ok(Ok(written.metadata.uid.unwrap_or_default()))
    }

    /// An object being deleted (or no longer matching): delete its flow (whose `onDelete` runs
    /// first), then, once the flow is gone, remove the finalizer from the object.
    async fn let_go(
        &self,
        obj: &DynamicObject,
        child: Option<&DynamicObject>,
    ) -> Result<(), Error> {
        let obj_ns = obj.metadata.namespace.as_deref().unwrap_or_default();
        let obj_name = obj.metadata.name.as_deref().unwrap_or_default();
        let name = child::child_name(self.r.flow_id.name, obj_ns, obj_name);
        self.r.own.forget(&format!("{}/{name}/", self.r.uid));
        match child {
            Some(c) if c.metadata.deletion_timestamp.is_none() => {
                let name = c.metadata.name.clone().unwrap_or_default();
                self.flows.delete(&name, &DeleteParams::default()).await?;
            }
            Some(_) => {} // its onDelete runs; its deletion wakes us again
            None => {
                let objects = self.objects_api(obj);
                finalizer::set_named(&objects, obj, &self.finalizer, false).await?;
            }
        }
        Ok(())
    }
}
