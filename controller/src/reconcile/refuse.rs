//! Marking Failed a flow the reconcile cannot handle — a spec nested too deep to read, or one
//! whose reconcile panicked — from what is known without its spec: the status patch needs only
//! the name, and goes through the raw type so that the answer (the whole flow) still decodes.

use super::events::EventType;
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use super::report::publish_to;
use super::{finalizer, now, status, Context, Error};
use crate::raw::RawFlow;

/// Sets status `phase: Failed` with `reason` and `message` (once per generation: a reconcile
/// that finds it already said changes nothing, so it triggers no new reconcile), with a Warning
/// Event and a failed run counted the first time.
pub async fn fail(ctx: &Context, flow: &RawFlow, reason: &str, message: &str) -> Result<(), Error> {
    let (ns, name) = (flow.namespace().unwrap_or_default(), flow.name_any());
    let flows: Api<RawFlow> = Api::namespaced(ctx.client.clone(), &ns);
    let generation = flow.metadata.generation.unwrap_or(0);
    let previous = flow.status_value().unwrap_or(Value::Null);
    let said_before = status::already_failed(&previous, generation, reason);
    let next = status::not_run(&previous, generation, reason, message, now());
    if !said_before || previous["message"].as_str() != next.message.as_deref() {
        flows
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status::to_patch(&next) })),
            )
            .await?;
    }
    if !said_before {
        publish_to(ctx, flow, EventType::Warning, reason, message).await;
        ctx.metrics.run_finished(&format!("{ns}/{name}"), "Failed");
    }
    Ok(())
}

/// Lets a flow that is being deleted go (drops the onDelete finalizer): its onDelete steps cannot
/// be read, so none can run.
pub async fn let_go(ctx: &Context, flow: &RawFlow) -> Result<(), Error> {
    let ours = flow.finalizers().iter().any(|f| f == finalizer::ON_DELETE);
    if flow.metadata.deletion_timestamp.is_none() || !ours {
        return Ok(());
    }
    let rest: Vec<&String> = flow
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer::ON_DELETE)
        .collect();
    // Guarded by the resourceVersion, so another controller's finalizer is never lost.
    let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": flow.metadata.resource_version}});
    Api::<RawFlow>::namespaced(ctx.client.clone(), &flow.namespace().unwrap_or_default())
        .patch(
            &flow.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}
