//! What a reconcile tells the world about a flow: its status, written only through
//! [`patch_status`], and its Events, published only through [`publish`]. Also the outcomes that
//! end a reconcile before a run is driven, each a Failed status that says what to do, told once:
//! a spec that does not compile, a run state that cannot be read, and a flow the reconcile cannot
//! handle at all (nested too deep to read, or its reconcile panicked).

use std::fmt::Debug;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use pseudoflow_crd::Diagnostics;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tracing::warn;

use super::events::{EventType, NewEvent};
use super::{finalizer, now, status, store, Context, Error, Reconciling};
use crate::limits::{bounded, MAX_EVENT_NOTE_CHARS, MAX_STATUS_MESSAGE_CHARS};
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
    ctx: &Context,
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

/// [`publish`], in a task of its own: the caller waits on the handle when it must.
pub fn publish_soon(
    ctx: &Context,
    about: ObjectReference,
    ty: EventType,
    reason: &str,
    note: &str,
) -> tokio::task::JoinHandle<()> {
    let (note, action) = note_and_action(reason, note);
    let (events, reason) = (ctx.events.clone(), reason.to_string());
    tokio::spawn(async move {
        let ev = NewEvent {
            type_: ty,
            reason: &reason,
            action: &action,
            note: &note,
        };
        if let Err(e) = events.publish(&ev, &about).await {
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

/// Fails the flow `InvalidSpec` listing every error with its path; a flow being deleted with an
/// invalid spec is let go, since no onDelete step can run.
pub async fn invalid_spec(
    r: &Reconciling<'_>,
    flows: &Api<DynamicObject>,
    previous: &Value,
    diags: &Diagnostics,
    deleting: bool,
) -> Result<(), Error> {
    let generation = r.flow.metadata.generation.unwrap_or(0);
    let errors: Vec<String> = diags
        .errors()
        .map(|d| format!("{}: {}", d.path, d.message))
        .collect();
    let message = format!("{} problem(s): {}", errors.len(), errors.join("; "));
    let message = bounded(&message, MAX_STATUS_MESSAGE_CHARS);
    if !status::already_failed(previous, generation, "InvalidSpec") {
        r.publish(EventType::Warning, "InvalidSpec", &message).await;
        r.ctx.metrics.run_finished(&r.key(), "Failed");
    }
    let invalid = status::invalid(previous, generation, &message, r.now);
    r.told().await;
    patch_status(flows, r.flow_id.name, status::to_patch(&invalid)).await?;
    if deleting {
        finalizer::remove(flows, r.flow).await?;
    }
    Ok(())
}

/// Fails the flow `RunStateUnreadable`: starting afresh instead would re-run every step on every
/// reconcile, so the user decides (by deleting the Secret).
pub async fn unreadable_run_state(
    r: &Reconciling<'_>,
    flows: &Api<DynamicObject>,
    previous: &Value,
    why: &str,
) -> Result<(), Error> {
    let message = format!(
        "the stored state of this flow's run (Secret {}) cannot be read: {why}; delete that \
         Secret to start a new run",
        store::name(r.flow_id.name)
    );
    if previous["reason"] != "RunStateUnreadable" {
        r.publish(EventType::Warning, "RunStateUnreadable", &message)
            .await;
    }
    let unreadable = status::failed_with("RunStateUnreadable", &message);
    r.told().await;
    patch_status(flows, r.flow_id.name, status::to_patch(&unreadable)).await?;
    Ok(())
}

/// Fails the flow `RunStateTampered`: its run state is not what the controller stored (changed,
/// unsealed, or an older state put back), so nothing more of that run is driven. The Warning
/// Event names who last wrote the Secret, as its managedFields say.
pub async fn tampered_run_state(
    r: &Reconciling<'_>,
    flows: &Api<DynamicObject>,
    previous: &Value,
    tampered: &store::Tampered,
) -> Result<(), Error> {
    let message = format!(
        "the stored state of this flow's run (Secret {}) is not what the controller wrote: {}; \
         last written by {}. Nothing more of this run is driven; delete that Secret to start a \
         new run",
        store::name(r.flow_id.name),
        tampered.why,
        tampered.writer,
    );
    let message = bounded(&message, MAX_STATUS_MESSAGE_CHARS);
    if previous["reason"] != "RunStateTampered" {
        r.publish(EventType::Warning, "RunStateTampered", &message)
            .await;
        r.ctx.metrics.run_finished(&r.key(), "Failed");
    }
    let tampered = status::failed_with("RunStateTampered", &message);
    r.told().await;
    patch_status(flows, r.flow_id.name, status::to_patch(&tampered)).await?;
    Ok(())
}

/// Fails a flow the reconcile cannot handle, from what is known without its spec: `phase:
/// Failed` with `reason` and `message` (once per generation: a reconcile that finds it already
/// said changes nothing, so it triggers no new reconcile), with a Warning Event and a failed
/// run counted the first time. The patch goes through the raw type so that the answer (the
/// whole flow) still decodes.
pub async fn refuse(
    ctx: &Context,
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
