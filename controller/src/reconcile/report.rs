//! What a reconcile tells the world: Events about a flow and its status subresource.

use super::events::{EventType, NewEvent};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::Resource;
use serde_json::{json, Value};
use tracing::warn;

use super::{flow_resource, Context, Error};
use crate::limits::{bounded, MAX_EVENT_NOTE_CHARS};
use crate::raw::RawFlow;

/// Merges `status` into the flow's status (null fields remove what they name).
pub async fn patch_status(
    flows: &Api<DynamicObject>,
    name: &str,
    status: Value,
) -> Result<(), Error> {
    flows
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await?;
    Ok(())
}

/// Publishes an Event about `flow`; a failure to publish is logged, never fatal.
pub async fn publish(ctx: &Context, flow: &DynamicObject, ty: EventType, reason: &str, note: &str) {
    publish_about(ctx, &flow.object_ref(&flow_resource()), ty, reason, note).await
}

/// [`publish`] for a flow known only by its metadata.
pub async fn publish_to(ctx: &Context, flow: &RawFlow, ty: EventType, reason: &str, note: &str) {
    publish_about(ctx, &flow.object_ref(&()), ty, reason, note).await
}

async fn publish_about(
    ctx: &Context,
    about: &ObjectReference,
    ty: EventType,
    reason: &str,
    note: &str,
) {
    let note = bounded(note, MAX_EVENT_NOTE_CHARS);
    // Events with the same reason and action fold into one series that keeps the first note;
    // an action per distinct note keeps every message (identical ones still fold into a
    // counted series).
    let action = format!(
        "{reason}-{:016x}",
        pseudoflow_compiler::names::stable_hash(&[&note])
    );
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
