//! Serving only the objects that changed since the last reconcile ([`super::super::pending`]):
//! each read alone, with the one child flow under its name, instead of every object and every
//! child listed at each wake.

use std::collections::BTreeSet;
use std::sync::LazyLock;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, GetParams};
use pseudoflow_crd::bind::BindRecord;

use super::children::{owned_by, Children};
use super::{Binding, OBJECTS_SERVED_AT_ONCE, RESYNC, RETRY_OBJECT};
use crate::bind::{child, decode, object, pages, summary::Refused};
use crate::turns::ObjectReads;

/// Objects read alone at once (8 at once per bound flow, 16 bound flows reconciled at once):
/// each is held whole, as text, until it is cut, so they are shared per namespace and bounded
/// in all ([`crate::turns::ObjectReads`]).
static OBJECT_READS: LazyLock<ObjectReads> = LazyLock::new(ObjectReads::default);

impl Binding<'_> {
    /// Serves `objects` (namespace, name), several at once; returns how soon to look again.
    /// An object that could not be served for now is kept to be served again then.
    pub(super) async fn serve_changed(&self, mut objects: BTreeSet<(String, String)>) -> Duration {
        let pending = &self.r.own.watches.pending;
        if self.bind.record == Some(BindRecord::Object) {
            // No more than the runs the flow may still start: the others stay names in the
            // queue, read when runs end (each end wakes the flow), never read to wait.
            let room = self.r.own.object_runs.room(self.r.uid);
            let later: Vec<_> = objects.iter().skip(room).cloned().collect();
            for (ns, name) in later {
                objects.remove(&(ns.clone(), name.clone()));
                pending.changed(self.r.uid, &ns, &name);
            }
        }
        let served: Vec<((String, String), Option<Refused>, Duration)> =
            futures::stream::iter(objects.into_iter().map(|(ns, name)| async move {
                let (refusal, again) = self.serve_named(&ns, &name).await;
                ((ns, name), refusal, again)
            }))
            .buffer_unordered(OBJECTS_SERVED_AT_ONCE)
            .collect()
            .await;
        let mut again = RESYNC;
        for ((ns, name), refusal, sooner) in served {
            let key = object::key_of(&ns, &name);
            pending.served(
                self.r.uid,
                &key,
                refusal.as_ref().map(|r| r.message.as_str()),
            );
            if sooner < RESYNC {
                pending.changed(self.r.uid, &ns, &name);
            }
            again = again.min(sooner);
        }
        again
    }

    /// Reads object `ns/name` and the child under its name, and serves it; an object gone
    /// (its finalizer removed, or never ours) needs nothing.
    async fn serve_named(&self, ns: &str, name: &str) -> (Option<Refused>, Duration) {
        let object = object::key_of(ns, name);
        let failed = |message: String| {
            (
                Some(Refused {
                    object: object.clone(),
                    message,
                }),
                RETRY_OBJECT,
            )
        };
        let raw = match self.raw_object(ns, name).await {
            Ok(Some(raw)) => raw,
            Ok(None) => {
                // Gone: what its serves saw goes too (a flow recorded in its objects), and
                // what was remembered of its related objects.
                self.r.own.outcomes.record(self.r.uid, object.clone(), None);
                crate::bind::in_object::related::forget(self.r.own, self.r.uid, &object);
                return (None, RESYNC);
            }
            Err(e) => return failed(format!("reading it: {e}")),
        };
        let children = if self.bind.record == Some(BindRecord::Object) {
            // Recorded in the object: no child to read (one `record: Child` left is let go by
            // the full pass that follows the flow's change of `record`).
            Children::default()
        } else {
            let child = child::child_name(self.r.flow_id.name, ns, name);
            match self.child_named(&child).await {
                Ok(children) => children,
                Err(e) => return failed(format!("reading its flow: {e}")),
            }
        };
        let mut again = RESYNC;
        let refusal = self.serve_raw(&raw, 0, &children, &mut again).await;
        (refusal, again)
    }

    /// The object as raw text (decoded alone by the caller, like a list's items; one too large
    /// cut to its metadata and size as soon as it is read), as the flow's ServiceAccount; None
    /// when it does not exist. Reads are shared per namespace of the bound flow ([`OBJECT_READS`]).
    async fn raw_object(&self, ns: &str, name: &str) -> Result<Option<String>, kube::Error> {
        let client = self.objects.clone().into_client();
        let api: Api<DynamicObject> = if ns.is_empty() {
            Api::all_with(client.clone(), &self.ar)
        } else {
            Api::namespaced_with(client.clone(), ns, &self.ar)
        };
        let request = kube::core::Request::new(api.resource_url())
            .get(name, &GetParams::default())
            .map_err(kube::Error::BuildRequest)?;
        let _turn = OBJECT_READS.read(self.r.ns()).await;
        match client.request_text(request).await {
            Ok(text) => Ok(Some(decode::cut(text))),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The child flow named `name`, if it claims to be this flow's (as [`Binding::children`]
    /// would list it).
    async fn child_named(&self, name: &str) -> Result<Children, kube::Error> {
        let mut out = Children::default();
        if let Some(c) = self.flows.get_opt(name).await? {
            if owned_by(&c, self.r.uid) {
                out.by_name.insert(name.to_string(), pages::slim_child(c));
            }
        }
        Ok(out)
    }
}
