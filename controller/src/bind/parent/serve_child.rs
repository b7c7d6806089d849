//! Serving one object through its child flow (`bind.record: Child`): the child made or
//! updated when the object (or a related object, or the flow) changed, the object's finalizer
//! and claim, and letting go of an object being deleted or no longer matching.

use std::collections::BTreeMap;

use kube::api::{DeleteParams, DynamicObject, PostParams};
use pseudoflow_crd::bind::BindRecord;
use serde_json::{json, Value};
use tracing::info;

use super::children::{Children, Picked};
use super::release::retire;
use super::Binding;
use crate::bind::child::{self, Parent, FLOW_GENERATION_ANNOTATION};
use crate::bind::revision::REVISION_ANNOTATION;
use crate::bind::rollout::With;
use crate::bind::{claim, object};
use crate::bind::{NotServed, Served};
use crate::flow::events::EventType;
use crate::flow::{finalizer, Error};

impl Binding<'_> {
    /// Serves one object; returns why it cannot be served, if so.
    pub(super) async fn serve(&self, obj: &DynamicObject, children: &Children) -> Served {
        let obj_ns = obj.metadata.namespace.as_deref().unwrap_or_default();
        let obj_name = obj.metadata.name.as_deref().unwrap_or_default();
        let name = child::child_name(self.r.flow_id.name, obj_ns, obj_name);
        let leaving = self.leaving(&obj.metadata);
        if self.bind.record == Some(BindRecord::Object) {
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
                return Ok(Some(NotServed(why)));
            }
        };
        if leaving {
            self.let_go(obj, child.or(old)).await?;
            return Ok(None);
        }
        let view = object::view(obj);
        let seen = match self.related_now(&view).await? {
            Ok(seen) => seen,
            Err(why) => return Ok(Some(NotServed(why))),
        };
        let previous = child.or(old).map(|c| &c.data["spec"]["bound"]["object"]);
        let trigger = child::trigger(previous, &view, self.bind);
        let trigger = match child {
            Some(c) => self.with_related(&name, c, trigger, &seen),
            None => trigger,
        };
        let (with, remake) = self.revision_of(obj, child, old.is_some());
        if trigger.is_none() && !remake {
            self.remember(&name, &seen);
            return Ok(None);
        }
        let trigger = trigger.unwrap_or_else(|| json!({"event": "update", "changed": []}));
        let versions: BTreeMap<String, String> = seen
            .iter()
            .map(|(key, s)| (key.clone(), s.version.clone()))
            .collect();
        let spec = with.spec.as_deref().unwrap_or(&self.r.raw_spec);
        let parent = Parent {
            spec,
            ..self.parent()
        };
        // Its run reads the object with its status as read now (`${object.status}`).
        let read = object::run_view(&view, obj);
        let made = child::child_flow(&parent, &name, &self.ar.plural, &read, &trigger, &versions);
        let child_uid = match self.write_child(&name, child, made).await? {
            Ok(uid) => uid,
            Err(why) => return Ok(Some(NotServed(why))),
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

    /// The revision `obj` is served with, and whether its child (`child`; `old`: one an older
    /// controller named) is re-made though the object did not change: the flow changed (in
    /// waves, only if that changes the object's revision), or its revision did (a rollout's:
    /// bind/rollout).
    fn revision_of(
        &self,
        obj: &DynamicObject,
        child: Option<&DynamicObject>,
        old: bool,
    ) -> (With, bool) {
        let annotation = |c: &DynamicObject, k: &str| {
            let a = c.metadata.annotations.as_ref();
            a.and_then(|a| a.get(k)).cloned()
        };
        let generation = self.parent().generation.to_string();
        let flow_changed = child.is_some_and(|c| {
            annotation(c, FLOW_GENERATION_ANNOTATION).as_ref() != Some(&generation)
        }) || old;
        let recorded = child.and_then(|c| annotation(c, REVISION_ANNOTATION));
        let with = self.with(&object::key(obj), recorded.as_deref());
        let stays = recorded.as_deref() == Some(with.hash.as_str());
        let waved = self.assign.as_ref().is_some_and(|a| a.waved);
        let flow_changed = flow_changed && !(waved && stays && !old);
        let moved = self.assign.is_some() && recorded.is_some() && !stays;
        (with, flow_changed || moved)
    }

    /// The revision the object `key` is served with, its record naming `recorded`: the
    /// rollout's choice, or the flow's spec as it is now when it keeps no revision.
    pub(super) fn with(&self, key: &str, recorded: Option<&str>) -> With {
        match &self.assign {
            Some(a) => a.with(key, recorded),
            None => With {
                hash: crate::bind::revision::hash(&self.r.raw_spec),
                spec: None,
            },
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
