//! The reconcile of a bound flow (the parent): it runs no steps itself. It opens the binding as
//! its ServiceAccount (the kind exists, the account has the rights, the watch runs), keeps one
//! child flow and one finalizer per matching object, follows deleted objects through their
//! child's `onDelete` to the removal of the finalizer, and summarises its objects in its status.
//! Deleted (or no longer bound), it lets its objects go: see [`release`].

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use pseudoflow_crd::bind::{Bind, BIND_FINALIZER, BOUND_TO_LABEL, RELEASED_ANNOTATION};
use pseudoflow_crd::selector::Selector;
use pseudoflow_crd::{FlowPhase, PseudoFlowSpec, PseudoFlowStatus};
use serde_json::{json, Value};
use tracing::info;

use super::child::{self, Parent, FLOW_GENERATION_ANNOTATION, OBJECT_ANNOTATION};
use super::related::{self, Seen};
use super::summary::{self, Refused};
use super::{access, object, pages, watch};
use crate::reconcile::events::EventType;
use crate::reconcile::{finalizer, outcome, status, Error, Reconciling};

/// How often a bound flow looks at all its objects even if no watch event came (a missed event,
/// rights granted since a refusal).
const RESYNC: Duration = Duration::from_secs(300);
/// How soon an object that could not be served is tried again.
const RETRY_OBJECT: Duration = Duration::from_secs(10);
/// How soon a refused binding is tried again.
const RETRY_REFUSED: Duration = Duration::from_secs(30);

/// One reconcile of a bound flow.
pub(crate) async fn reconcile_parent(
    r: &Reconciling<'_>,
    flows: &Api<DynamicObject>,
    spec: &PseudoFlowSpec,
    previous: &Value,
) -> Result<Action, Error> {
    let deleting = r.flow.metadata.deletion_timestamp.is_some();
    let Some(bind) = spec.bind.as_ref().filter(|_| !deleting) else {
        release(r, flows).await?;
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
    let objects = match pages::list_kept(&binding.objects, &ListParams::default(), |o| {
        Some(pages::slim_object(o))
    })
    .await
    {
        Ok(objects) => objects,
        Err(e) => {
            let message = format!("listing {} objects: {e}", bind.kind);
            refused(r, flows, previous, &message).await?;
            return Ok(Action::requeue(RETRY_REFUSED));
        }
    };
    let children = binding.children().await?;
    let mut refusals = Vec::new();
    let mut again = RESYNC;
    for obj in &objects {
        // One object's trouble (a conflict, an admission webhook refusing its finalizer) is
        // its own: the others are served, and it is tried again soon.
        let message = match binding.serve(obj, &children).await {
            Ok(None) => continue,
            Ok(Some(why)) => why,
            Err(e) => {
                again = RETRY_OBJECT;
                format!("serving it: {e}")
            }
        };
        let object = object::key(obj);
        refusals.push(Refused { object, message });
    }
    // The lists are let go before the children are read again, a state each, to sum up.
    drop((objects, children));
    let states = binding.child_states().await?;
    summarise(r, flows, previous, &bind.kind, &states, &refusals).await?;
    Ok(Action::requeue(again))
}

/// A bound flow's binding, opened for one reconcile.
struct Binding<'a> {
    r: &'a Reconciling<'a>,
    bind: &'a Bind,
    /// The bound flow's flows API (its namespace), for its children.
    flows: &'a Api<DynamicObject>,
    /// The objects of the kind, as the flow's ServiceAccount.
    objects: Api<DynamicObject>,
    ar: ApiResource,
    selector: Selector,
    finalizer: String,
    raw_spec: Value,
    /// The related kinds (`bind.related`) by (apiVersion, kind): their resource and whether it
    /// is namespaced, discovered as the flow's ServiceAccount.
    related_kinds: BTreeMap<(String, String), (ApiResource, bool)>,
}

impl<'a> Binding<'a> {
    /// The binding, or why it cannot be served: no client for the ServiceAccount, an unknown
    /// kind, a right the ServiceAccount lacks, a refused watch.
    async fn open(
        r: &'a Reconciling<'a>,
        flows: &'a Api<DynamicObject>,
        spec: &PseudoFlowSpec,
        bind: &'a Bind,
    ) -> Result<Binding<'a>, String> {
        let ns = r.ns();
        let sa = spec.service_account_name.as_deref().unwrap_or("default");
        let client = r.ctx.binder.client_as(ns, sa)?;
        let (ar, namespaced) = r.ctx.binder.kind(&client, ns, sa, bind).await?;
        let scope = (namespaced && !bind.all_namespaces).then_some(ns);
        let objects = match scope {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let who = format!("{ns}/{sa}");
        let what = format!("{}/{} {scope:?} as {who}", bind.api_version, bind.kind);
        let watches = &r.ctx.binder.watches;
        match watches.running(r.uid, &what) {
            Some(Some(refusal)) => return Err(refusal),
            // Its rights were checked when it started; a revoked one shows as a refused watch.
            Some(None) => {}
            None => {
                let writes = bind.status.writes_anything();
                let missing = access::missing_right(&client, &who, &ar, scope, writes).await;
                if let Some(m) = missing.map_err(|e| format!("asking what {who} may do: {e}"))? {
                    return Err(m);
                }
                watches.start(watch::Target {
                    uid: r.uid.to_string(),
                    flow: (ns.to_string(), r.flow_id.name.to_string()),
                    what,
                    api: objects.clone(),
                });
            }
        }
        let related_kinds = open_related(r, &client, bind, &who).await?;
        let selector = match &bind.selector {
            Some(s) => s.parse().map_err(|e| e.to_string())?,
            None => Selector(vec![]),
        };
        Ok(Binding {
            related_kinds,
            r,
            bind,
            flows,
            objects,
            ar,
            selector,
            finalizer: object::finalizer_name(ns, r.flow_id.name),
            raw_spec: r.flow.data.get("spec").cloned().unwrap_or(Value::Null),
        })
    }

    /// The child flows of this bound flow (labelled, and owned by it), by name.
    async fn children(&self) -> Result<BTreeMap<String, DynamicObject>, Error> {
        let uid = self.r.uid;
        let children = pages::list_kept(self.flows, &children_of(self.r.flow_id.name), |c| {
            owned_by(&c, uid).then(|| pages::slim_child(c))
        })
        .await?;
        Ok(children
            .into_iter()
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
            .collect())
    }

    /// Each child flow's object and its run's state: all that summing up reads.
    async fn child_states(&self) -> Result<Vec<(String, DynamicObject)>, Error> {
        let uid = self.r.uid;
        let states = pages::list_kept(self.flows, &children_of(self.r.flow_id.name), |c| {
            owned_by(&c, uid).then(|| pages::child_state(c))
        })
        .await?;
        Ok(states)
    }

    fn matches(&self, obj: &DynamicObject) -> bool {
        self.selector
            .matches(&obj.metadata.labels.clone().unwrap_or_default())
    }

    /// Serves one object; returns why it cannot be served, if so.
    async fn serve(
        &self,
        obj: &DynamicObject,
        children: &BTreeMap<String, DynamicObject>,
    ) -> Result<Option<String>, Error> {
        let obj_ns = obj.metadata.namespace.as_deref().unwrap_or_default();
        let obj_name = obj.metadata.name.as_deref().unwrap_or_default();
        let name = child::child_name(self.r.flow_id.name, obj_ns, obj_name);
        let child = children.get(&name);
        let leaving = obj.metadata.deletion_timestamp.is_some() || !self.matches(obj);
        if leaving {
            self.let_go(obj, child).await?;
            return Ok(None);
        }
        let view = object::view(obj);
        let seen = match self.related_now(&view).await? {
            Ok(seen) => seen,
            Err(why) => return Ok(Some(why)),
        };
        let previous = child.map(|c| &c.data["spec"]["bound"]["object"]);
        let trigger = child::trigger(previous, &view, self.bind);
        let trigger = match child {
            Some(c) => {
                let recorded: BTreeMap<String, String> =
                    serde_json::from_value(c.data["spec"]["bound"]["related"].clone())
                        .unwrap_or_default();
                let binder = &self.r.ctx.binder;
                let changed: Vec<String> = seen
                    .iter()
                    .filter(|(key, now)| {
                        let remembered = binder.remembered(&self.memo_key(&name, key));
                        related::changed(&recorded, key, now, remembered.as_ref())
                    })
                    .map(|(key, _)| key.clone())
                    .collect();
                with_related_changes(trigger, changed)
            }
            None => trigger,
        };
        let flow_changed = child.is_some_and(|c| {
            let a = c.metadata.annotations.as_ref();
            let g = a.and_then(|a| a.get(FLOW_GENERATION_ANNOTATION));
            g.map(String::as_str) != Some(&self.parent().generation.to_string())
        });
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
        if let Some(why) = self.write_child(&name, child, made).await? {
            return Ok(Some(why));
        }
        self.remember(&name, &seen);
        // Only once its flow exists: an object whose flow was refused keeps no finalizer of ours.
        let objects = self.objects_api(obj);
        finalizer::set_named(&objects, obj, &self.finalizer, true).await?;
        Ok(None)
    }

    /// What each related object of `view` is now (`bind.related`), read as the flow's
    /// ServiceAccount; `Err` says why the object cannot be served (a reference that renders to
    /// no name, a related object the ServiceAccount may not read).
    async fn related_now(
        &self,
        view: &Value,
    ) -> Result<Result<Vec<(String, Seen)>, String>, Error> {
        if self.bind.related.is_empty() {
            return Ok(Ok(vec![]));
        }
        let resolved = match related::resolve(&self.r.ctx.engine, &self.bind.related, view) {
            Ok(r) => r,
            Err(why) => return Ok(Err(why)),
        };
        let client = self.objects.clone().into_client();
        let mut out = Vec::new();
        for res in resolved {
            let rel = &self.bind.related[res.index];
            let id = (rel.api_version.clone(), rel.kind.clone());
            let Some((ar, namespaced)) = self.related_kinds.get(&id) else {
                continue;
            };
            let api: Api<DynamicObject> = match (&res.namespace, namespaced) {
                (Some(ns), true) => Api::namespaced_with(client.clone(), ns, ar),
                _ => Api::all_with(client.clone(), ar),
            };
            let found = match api.get_opt(&res.name).await {
                Ok(found) => found,
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    let ns = res.namespace.as_deref().filter(|_| *namespaced);
                    let who = self.who();
                    let m = access::related_message(&who, "get", ar, ns);
                    let i = res.index;
                    return Ok(Err(format!("spec.bind.related[{i}] ({}): {m}", res.key)));
                }
                Err(e) => return Err(e.into()),
            };
            let version = found
                .as_ref()
                .and_then(|o| o.metadata.resource_version.clone())
                .unwrap_or_default();
            let digest = related::content_digest(found.as_ref());
            out.push((res.key, Seen { version, digest }));
        }
        Ok(Ok(out))
    }

    fn who(&self) -> String {
        let raw = &self.raw_spec["serviceAccountName"];
        format!("{}/{}", self.r.ns(), raw.as_str().unwrap_or("default"))
    }

    fn memo_key(&self, child: &str, key: &str) -> String {
        format!("{}/{child}/{key}", self.r.uid)
    }

    fn remember(&self, child: &str, seen: &[(String, Seen)]) {
        for (key, s) in seen {
            let memo = self.memo_key(child, key);
            self.r.ctx.binder.remember(memo, s.clone());
        }
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

    /// Creates the child, or updates the one it owns; a flow of that name it does not own is
    /// refused (a tenant may have created it to have it adopted), with an Event.
    async fn write_child(
        &self,
        name: &str,
        existing: Option<&DynamicObject>,
        mut made: Value,
    ) -> Result<Option<String>, Error> {
        let Some(existing) = existing else {
            let flow: DynamicObject = serde_json::from_value(made).expect("a flow object");
            return match self.flows.create(&PostParams::default(), &flow).await {
                Ok(_) => {
                    info!(flow = %self.r.key(), child = name, "made a flow for an object");
                    Ok(None)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let why = format!(
                        "a PseudoFlow named {name} already exists and is not this flow's; it is \
                         not adopted (delete or rename it to have the object served)"
                    );
                    self.r
                        .publish(EventType::Warning, "ChildRefused", &why)
                        .await;
                    Ok(Some(why))
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
        self.flows
            .replace(name, &PostParams::default(), &updated)
            .await?;
        Ok(None)
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
        self.r.ctx.binder.forget(&format!("{}/{name}/", self.r.uid));
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

/// Opens the watches on the related kinds (`bind.related`, one per kind, as the flow's
/// ServiceAccount, after checking its rights) and stops those of kinds no longer related;
/// returns the kinds' resources.
async fn open_related(
    r: &Reconciling<'_>,
    client: &kube::Client,
    bind: &Bind,
    who: &str,
) -> Result<BTreeMap<(String, String), (ApiResource, bool)>, String> {
    let ns = r.ns();
    let sa = who.split_once('/').map(|(_, sa)| sa).unwrap_or("default");
    let watches = &r.ctx.binder.watches;
    let mut kinds = BTreeMap::new();
    let mut keys = Vec::new();
    for rel in &bind.related {
        let id = (rel.api_version.clone(), rel.kind.clone());
        if kinds.contains_key(&id) {
            continue;
        }
        let binder = &r.ctx.binder;
        let (ar, namespaced) = binder
            .kind_of(client, ns, sa, &rel.api_version, &rel.kind)
            .await?;
        let scope = (namespaced && !bind.all_namespaces).then_some(ns);
        let key = watch::related_key(r.uid, &rel.api_version, &rel.kind);
        let what = format!("{}/{} {scope:?} as {who}", rel.api_version, rel.kind);
        match watches.running(&key, &what) {
            Some(Some(refusal)) => return Err(refusal),
            Some(None) => {}
            None => {
                let missing = access::missing_related_right(client, who, &ar, scope).await;
                if let Some(m) = missing.map_err(|e| format!("asking what {who} may do: {e}"))? {
                    return Err(m);
                }
                let api = match scope {
                    Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
                    None => Api::all_with(client.clone(), &ar),
                };
                watches.start(watch::Target {
                    uid: key.clone(),
                    flow: (ns.to_string(), r.flow_id.name.to_string()),
                    what,
                    api,
                });
            }
        }
        keys.push(key);
        kinds.insert(id, (ar, namespaced));
    }
    watches.keep_related(r.uid, &keys);
    Ok(kinds)
}

/// `trigger` with the related objects that `changed` (their keys) added: an update naming them
/// when nothing else changed, the object's own update naming them too; a create stays a create.
fn with_related_changes(trigger: Option<Value>, changed: Vec<String>) -> Option<Value> {
    if changed.is_empty() {
        return trigger;
    }
    match trigger {
        None => Some(json!({"event": "update", "changed": changed})),
        Some(mut t) if t["event"] == "update" => {
            if let Some(list) = t["changed"].as_array_mut() {
                list.extend(changed.into_iter().map(Value::String));
            }
            Some(t)
        }
        Some(t) => Some(t),
    }
}

/// Selects the child flows of bound flow `parent` (each still checked for its owner).
fn children_of(parent: &str) -> ListParams {
    let label = format!(
        "{BOUND_TO_LABEL}={}",
        pseudoflow_compiler::names::label_value(parent)
    );
    ListParams::default().labels(&label)
}

fn owned_by(c: &DynamicObject, uid: &str) -> bool {
    c.metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|o| o.uid == uid && o.controller == Some(true)))
}

/// The bound flow fails with `message` (told once per message: an Event and the status).
async fn refused(
    r: &Reconciling<'_>,
    flows: &Api<DynamicObject>,
    previous: &Value,
    message: &str,
) -> Result<(), Error> {
    let generation = r.flow.metadata.generation.unwrap_or(0);
    if previous["message"].as_str() == Some(message)
        && status::already_failed(previous, generation, "BindRefused")
    {
        return Ok(());
    }
    r.publish(EventType::Warning, "BindRefused", message).await;
    let next = status::not_run(previous, generation, "BindRefused", message, r.now);
    outcome::patch_status(flows, r.flow_id.name, status::replacing(previous, &next)).await
}

/// Writes the bound flow's status: its objects counted by phase, the latest failures.
async fn summarise(
    r: &Reconciling<'_>,
    flows: &Api<DynamicObject>,
    previous: &Value,
    kind: &str,
    states: &[(String, DynamicObject)],
    refusals: &[Refused],
) -> Result<(), Error> {
    let named: Vec<(String, &DynamicObject)> = states.iter().map(|(o, c)| (o.clone(), c)).collect();
    let s = summary::summarise(&named, refusals);
    let message = summary::message(kind, &s);
    let generation = r.flow.metadata.generation.unwrap_or(0);
    let conds = &previous["conditions"];
    let (busy, failed) = (s.creating > 0, s.failed > 0);
    let next = PseudoFlowStatus {
        observed_generation: Some(generation),
        phase: Some(if busy {
            FlowPhase::Running
        } else {
            FlowPhase::Succeeded
        }),
        reason: Some("Bound".into()),
        message: Some(message.clone()),
        conditions: vec![
            status::condition(
                conds,
                "Ready",
                !busy && !failed,
                "Bound",
                &message,
                generation,
                r.now,
            ),
            status::condition(
                conds,
                "Progressing",
                busy,
                "Bound",
                &message,
                generation,
                r.now,
            ),
            status::condition(
                conds, "Degraded", failed, "Bound", &message, generation, r.now,
            ),
        ],
        bound: Some(s),
        ..Default::default()
    };
    let patch = status::replacing(previous, &next);
    if status::without_nulls(&patch) != *previous {
        outcome::patch_status(flows, r.flow_id.name, patch).await?;
    }
    Ok(())
}

/// Lets the objects go, when the bound flow is deleted (also with a spec that no longer
/// compiles) or no longer bound: the finalizer comes
/// off each object, and each child flow is marked released and deleted, so no `onDelete` runs
/// and the objects stay as they are (docs/bound-flows.md). Then the flow's own finalizer goes.
pub(crate) async fn release(r: &Reconciling<'_>, flows: &Api<DynamicObject>) -> Result<(), Error> {
    r.ctx.binder.watches.stop(r.uid);
    r.ctx.binder.forget(&format!("{}/", r.uid));
    let children = flows.list(&children_of(r.flow_id.name)).await?;
    let fin = object::finalizer_name(r.ns(), r.flow_id.name);
    for c in children.items.iter().filter(|c| owned_by(c, r.uid)) {
        // The child's account is the bound flow's when it was made: known even if the bound
        // flow's spec no longer reads.
        let sa = c.data["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default");
        if let Err(e) = unfinalize_object(r, sa, c, &fin).await {
            let note = format!("removing finalizer {fin} from {}: {e}", object_of(c));
            r.publish(EventType::Warning, "ReleaseFailed", &note).await;
            return Err(e);
        }
        let name = c.metadata.name.clone().unwrap_or_default();
        let mark = json!({"metadata": {"annotations": {RELEASED_ANNOTATION: "true"}}});
        flows
            .patch(&name, &PatchParams::default(), &Patch::Merge(&mark))
            .await?;
        match flows.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    finalizer::set_named(flows, r.flow, BIND_FINALIZER, false).await?;
    Ok(())
}

fn object_of(child: &DynamicObject) -> String {
    let a = child.metadata.annotations.as_ref();
    a.and_then(|a| a.get(OBJECT_ANNOTATION))
        .cloned()
        .unwrap_or_default()
}

/// Removes `fin` from the object `child` serves, as the flow's ServiceAccount (gone: done).
async fn unfinalize_object(
    r: &Reconciling<'_>,
    sa: &str,
    child: &DynamicObject,
    fin: &str,
) -> Result<(), Error> {
    let bound = &child.data["spec"]["bound"];
    let obj = &bound["object"];
    let ar = super::object::resource_of(obj, bound["plural"].as_str().unwrap_or_default());
    let client = r.ctx.binder.client_as(r.ns(), sa).map_err(Error::Bind)?;
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    match api.get_opt(name).await? {
        Some(o) => Ok(finalizer::set_named(&api, &o, fin, false).await?),
        None => Ok(()),
    }
}
