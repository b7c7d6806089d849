//! `delete`: foreground deletion of one object, then a watch until it is gone. An object that
//! is already gone is a success with `changed: false`, so re-runs are idempotent.

use kube::api::DeleteParams;
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::steps::delete::DeleteStep;

use crate::api;
use crate::context::ExecCtx;
use crate::error::{is_not_found, StepError};
use crate::readiness::Seen;

/// Runs a `delete` step.
pub async fn run(ctx: &ExecCtx, step: &DeleteStep) -> Result<StepResult, StepError> {
    let t = &step.target;
    let api_version = api::api_version_for(t.api_version.as_deref(), &t.kind)?;
    api::require_name("target.name", &t.name)?;
    let label = delete_object(ctx, &api_version, &t.kind, &t.name, t.namespace.as_deref()).await?;
    Ok(match label {
        Some(l) => StepResult::succeeded(true, format!("deleted {l}")),
        None => StepResult::succeeded(false, format!("{} {} was already gone", t.kind, t.name)),
    })
}

/// Deletes an object (foreground) and waits until it is gone; None when it was already gone.
pub async fn delete_object(
    ctx: &ExecCtx,
    api_version: &str,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
) -> Result<Option<String>, StepError> {
    let Some(r) = api::resolve_opt(ctx, api_version, kind, false).await? else {
        return Ok(None);
    };
    let ns = api::namespace_for(ctx, &r, namespace);
    let api = api::api_for(ctx, &r, ns.as_deref()).await?;
    let uid = match api.delete(name, &DeleteParams::foreground()).await {
        Ok(either) => either.left().and_then(|o| o.metadata.uid),
        Err(e) if is_not_found(&e) => return Ok(None),
        Err(e) => return Err(ctx.api_err(e, api::call("delete", &r, name, ns.as_deref()))),
    };
    let label = api::display(kind, ns.as_deref(), name);
    ctx.note(format!("deleting {label}"));
    crate::watch::watch_until(ctx, api, api::call("get", &r, name, ns.as_deref()), |o| {
        let gone = match (o, &uid) {
            (None, _) => true,
            (Some(o), Some(uid)) => o.metadata.uid.as_ref() != Some(uid),
            (Some(_), None) => false,
        };
        let note = match o.and_then(|o| o.metadata.finalizers.clone()) {
            Some(f) if !gone && !f.is_empty() => format!("{label} still has finalizers {f:?}"),
            _ if gone => format!("{label} is gone"),
            _ => format!("{label} is still there"),
        };
        Ok(Seen { done: gone, note })
    })
    .await?;
    Ok(Some(label))
}
