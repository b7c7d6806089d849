//! Serving one object recorded in itself (`bind.record: Object`): what `record: Child` left
//! on it let go, the finalizer held only for the flow's `onDelete`, its related objects read
//! as the flow's ServiceAccount, then the object handed to [`in_object`].

use kube::api::DynamicObject;

use super::children::{Children, Picked};
use super::release::retire;
use super::Binding;
use crate::bind::{in_object, object};
use crate::bind::{NotServed, Served};
use crate::flow::finalizer;

impl Binding<'_> {
    /// Serves `obj` recorded in the object (`bind.record: Object`, [`in_object`]), after
    /// letting go of what `record: Child` left on it: its child (released: no `onDelete`
    /// runs) and our finalizer.
    pub(super) async fn serve_in_object(
        &self,
        obj: &DynamicObject,
        children: &Children,
        leaving: bool,
    ) -> Served {
        if let Picked::Child(c) | Picked::Old(c) = self.pick(obj, children) {
            retire(self.flows, c.metadata.name.as_deref().unwrap_or_default()).await?;
        }
        // What its related objects are now, as the ServiceAccount reads them; one it may not
        // read, or a reference that names nothing, leaves it unserved, naming the reference
        // (as a child-recorded object). An object leaving needs none.
        let seen = if leaving {
            in_object::related::forget(self.r.own, self.r.uid, &object::key(obj));
            vec![]
        } else {
            match self.related_now(&object::view(obj)).await? {
                Ok(seen) => seen,
                Err(why) => return Ok(Some(NotServed(why))),
            }
        };
        let serving = in_object::Serving {
            r: self.r,
            bind: self.bind,
            parent: self.parent(),
            plural: &self.ar.plural,
            objects: self.objects_api(obj),
            assign: self.assign.as_ref(),
            related: &seen,
        };
        // Our finalizer holds each object only for the flow's onDelete steps.
        let holds = in_object::deleted::has_on_delete(&self.r.raw_spec);
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
}
