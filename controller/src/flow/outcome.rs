//! What a reconcile tells the world about a flow: its status, written only through
//! [`patch_status`], and its Events, published only through [`publish`]. Also the outcome that
//! ends a reconcile of a flow it cannot handle at all (nested too deep to read, or its reconcile
//! panicked): a Failed status that says so, told once. (A spec that does not compile:
//! [`crate::serve`]'s dispatch; a run state that cannot be read: [`crate::reconcile`].)

use std::fmt::Debug;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tracing::warn;

use super::events::{EventType, NewEvent};
use super::{now, status, Error, Shared};
use crate::limits::{bounded, MAX_EVENT_NOTE_CHARS};
use crate::raw::RawFlow;

/// Merges `status` into the flow's status (null fields remove what they name). The flow may be
/// read typed-loosely ([`DynamicObject`]) or raw ([`RawFlow`], for a flow whose spec cannot be
/// decoded): the status is the same merge patch either way.
pub async fn patch_status<K>(flows: &Api<K>, name: &str, status: Value) -> Result<(), Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    flows
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
    Ok(())
}

/// Publishes an Event about the flow `about` refers to; a failure to publish is logged, never
/// fatal (an Event is a courtesy, the status is the record).
pub async fn publish(
    ctx: &Shared,
    about: &ObjectReference,
    ty: EventType,
    reason: &str,
    note: &str,
) {
    let (note, action) = note_and_action(reason, note);
    let ev = NewEvent {
        type_: ty,
        reason,
        action: &action,
        note: &note,
    };
    if let Err(e) = ctx.events.publish(&ev, about).await {
        warn!("event: {e}");
    }
}

/// [`publish`], in a task of its own: the caller waits on the handle when it must. The
/// Event's time is taken before the task starts, so Events told one after another keep that
/// order in time however their tasks run.
pub fn publish_soon(
    ctx: &Shared,
    about: ObjectReference,
    ty: EventType,
    reason: &str,
    note: &str,
) -> tokio::task::JoinHandle<()> {
    let (note, action) = note_and_action(reason, note);
    let (events, reason) = (ctx.events.clone(), reason.to_string());
    // Its time is now, when it is told: the task may reach the API after a later Event's.
    let at = events.stamp();
    tokio::spawn(async move {
        let ev = NewEvent {
            type_: ty,
            reason: &reason,
            action: &action,
            note: &note,
        };
        if let Err(e) = events.publish_at(&ev, &about, at).await {
            warn!("event: {e}");
        }
    })
}

/// The Event's note, bounded, and its action. Events with the same reason and action fold into
/// one series that keeps the first note; an action per distinct note keeps every message
/// (identical ones still fold into a counted series).
fn note_and_action(reason: &str, note: &str) -> (String, String) {
    let note = bounded(note, MAX_EVENT_NOTE_CHARS);
    let action = format!(
        "{reason}-{:016x}",
        pseudoflow_compiler::names::stable_hash(&[&note])
    );
    (note, action)
}

/// Fails a flow the reconcile cannot handle, from what is known without its spec: `phase:
/// Failed` with `reason` and `message` (once per generation: a reconcile that finds it already
/// said changes nothing, so it triggers no new reconcile), with a Warning Event and a failed
/// run counted the first time. The patch goes through the raw type so that the answer (the
/// whole flow) still decodes.
pub async fn refuse(
    ctx: &Shared,
    flow: &RawFlow,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    let (ns, name) = (flow.namespace().unwrap_or_default(), flow.name_any());
    let flows: Api<RawFlow> = Api::namespaced(ctx.client.clone(), &ns);
    let generation = flow.metadata.generation.unwrap_or(0);
    let previous = flow.status_value().unwrap_or(Value::Null);
    let said_before = status::already_failed(&previous, generation, reason);
    let next = status::not_run(&previous, generation, reason, message, now());
    if !said_before || previous["message"].as_str() != next.message.as_deref() {
        patch_status(&flows, &name, status::to_patch(&next)).await?;
    }
    if !said_before {
        let about = flow.object_ref(&());
        publish(ctx, &about, EventType::Warning, reason, message).await;
        ctx.metrics.run_finished(&format!("{ns}/{name}"), "Failed");
    }
    Ok(())
}
