//! `delete`: deletion of one object (foreground unless the step says otherwise), then a watch
//! until it is gone. An object that is already gone is a success with `changed: false`, so
//! re-runs are idempotent.

use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::steps::delete::{DeleteStep, Propagation};

use super::copy_mark;
use crate::api;
use crate::context::ExecCtx;
use crate::error::{is_not_found, StepError};
use crate::readiness::Seen;

/// Runs a `delete` step.
pub async fn run(ctx: &ExecCtx, step: &DeleteStep) -> Result<StepResult, StepError> {
    let t = &step.target;
    let api_version = api::api_version_for(t.api_version.as_deref(), &t.kind)?;
    api::require_name("target.name", &t.name)?;
    let ns = t.namespace.as_deref();
    let precondition = if step.only_copies {
        match own_copy(ctx, &api_version, &t.kind, &t.name, ns).await? {
            Copy::Gone => None,
            Copy::Ours(p) => Some(p),
            Copy::Theirs(label, owner) => {
                let msg = format!("{label} left in place: not this flow's copy ({owner})");
                return Ok(StepResult::succeeded(false, msg));
            }
        }
    } else {
        None
    };
    let label = match (step.only_copies, precondition) {
        (true, None) => None,
        (_, p) => {
            let how = Deletion {
                precondition: p,
                propagation: step.propagation.unwrap_or_default(),
            };
            delete_object_if(ctx, &api_version, &t.kind, &t.name, ns, how).await?
        }
    };
    Ok(match label {
        Some(l) => StepResult::succeeded(true, format!("deleted {l}")),
        None => StepResult::succeeded(false, format!("{} {} was already gone", t.kind, t.name)),
    })
}

/// What a `delete` with `onlyCopies` found under the target's name.
enum Copy {
    Gone,
    /// This flow's copy: deleted only as it was read (uid and resourceVersion).
    Ours(Preconditions),
    /// Someone else's: its label and owner.
    Theirs(String, String),
}

/// Reads the target to tell whether it is this flow's copy.
async fn own_copy(
    ctx: &ExecCtx,
    api_version: &str,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
) -> Result<Copy, StepError> {
    let Some(r) = api::resolve_opt(ctx, api_version, kind, false).await? else {
        return Ok(Copy::Gone);
    };
    let ns = api::namespace_for(ctx, &r, namespace);
    let api = api::api_for(ctx, &r, ns.as_deref()).await?;
    let obj = match api.get_opt(name).await {
        Ok(Some(o)) => o,
        Ok(None) => return Ok(Copy::Gone),
        Err(e) => return Err(ctx.api_err(e, api::call("get", &r, name, ns.as_deref()))),
    };
    if copy_mark::is_ours(&obj.metadata, &copy_mark::mark(ctx), None) {
        return Ok(Copy::Ours(Preconditions {
            uid: obj.metadata.uid.clone(),
            resource_version: obj.metadata.resource_version.clone(),
        }));
    }
    let label = api::display(kind, ns.as_deref(), name);
    Ok(Copy::Theirs(label, copy_mark::owner(&obj.metadata)))
}

/// Deletes an object (foreground) and waits until it is gone; None when it was already gone.
pub async fn delete_object(
    ctx: &ExecCtx,
    api_version: &str,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
) -> Result<Option<String>, StepError> {
    let how = Deletion {
        precondition: None,
        propagation: Propagation::Foreground,
    };
    delete_object_if(ctx, api_version, kind, name, namespace, how).await
}

/// How one object is deleted.
struct Deletion {
    /// Only if the object still is as read.
    precondition: Option<Preconditions>,
    /// What becomes of what it owns.
    propagation: Propagation,
}

impl Deletion {
    fn params(self) -> DeleteParams {
        let policy = match self.propagation {
            Propagation::Foreground => PropagationPolicy::Foreground,
            Propagation::Background => PropagationPolicy::Background,
            Propagation::Orphan => PropagationPolicy::Orphan,
        };
        DeleteParams {
            preconditions: self.precondition,
            propagation_policy: Some(policy),
            ..DeleteParams::default()
        }
    }
}

/// [`delete_object`], as `how` says.
async fn delete_object_if(
    ctx: &ExecCtx,
    api_version: &str,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    how: Deletion,
) -> Result<Option<String>, StepError> {
    let Some(r) = api::resolve_opt(ctx, api_version, kind, false).await? else {
        return Ok(None);
    };
    let ns = api::namespace_for(ctx, &r, namespace);
    let api = api::api_for(ctx, &r, ns.as_deref()).await?;
    let params = how.params();
    let uid = match api.delete(name, &params).await {
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
