//! The two ways a reconcile stops before driving a run: the spec does not compile, or the stored
//! run state cannot be read. Both end in a Failed status that says what to do, told once.

use super::events::EventType;
use kube::api::{Api, DynamicObject};
use pseudoflow_crd::Diagnostics;
use serde_json::Value;

use super::report::patch_status;
use super::run::Reconciling;
use super::{finalizer, status, store, Error};
use crate::limits::{bounded, MAX_STATUS_MESSAGE_CHARS};

/// Fails the flow `InvalidSpec` listing every error with its path; a flow being deleted with an
/// invalid spec is let go, since no onDelete step can run.
pub async fn spec(
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
    patch_status(flows, r.flow_id.name, status::to_patch(&invalid)).await?;
    if deleting {
        finalizer::remove(flows, r.flow).await?;
    }
    Ok(())
}

/// Fails the flow `RunStateUnreadable`: starting afresh instead would re-run every step on every
/// reconcile, so the user decides (by deleting the Secret).
pub async fn run_state(
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
    patch_status(flows, r.flow_id.name, status::to_patch(&unreadable)).await?;
    Ok(())
}
