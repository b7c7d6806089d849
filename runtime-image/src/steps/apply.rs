//! `apply`: server-side apply (field manager `pseudoflow`, forced) of every object in order.
//! Each object's kind is resolved by discovery only when its turn comes, after the objects
//! before it were applied, so a CRD and its first custom resource can share one step. With
//! `subresource: status`, each object's status subresource instead ([`apply_status`]).

use std::time::Duration;

use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use pseudoflow_crd::protocol::{StepResult, FIELD_MANAGER};
use pseudoflow_crd::steps::apply::{manifest_objects, ApplyStep};
use serde_json::Value;

use crate::api::{self, Resolved};
use crate::context::ExecCtx;
use crate::error::{Call, StepError};
use crate::readiness::{condition, Seen};

/// How long an applied CRD may take to become Established before its kind is used.
const CRD_ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// The outcome of applying several objects.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Whether any object's resourceVersion changed.
    pub changed: bool,
    /// `Kind/ns/name` of every object, in order.
    pub objects: Vec<String>,
}

/// Runs an `apply` step.
pub async fn run(ctx: &ExecCtx, step: &ApplyStep) -> Result<StepResult, StepError> {
    let objects = manifest_objects(&step.manifests).map_err(StepError::failed)?;
    if step.to_status() {
        let applied = apply_statuses(ctx, objects).await?;
        return Ok(StepResult::succeeded(
            applied.changed,
            summary_of_status(&applied),
        ));
    }
    let applied = apply_objects(ctx, objects).await?;
    Ok(StepResult::succeeded(applied.changed, summary(&applied)))
}

/// `applied the status of 1 object (changed): ...`-style summary.
fn summary_of_status(a: &Applied) -> String {
    let n = a.objects.len();
    let noun = if n == 1 { "object" } else { "objects" };
    let state = if a.changed { "changed" } else { "unchanged" };
    format!(
        "applied the status of {n} {noun} ({state}): {}",
        a.objects.join(", ")
    )
}

/// Applies the status of each object in order; stops at the first failure.
async fn apply_statuses(ctx: &ExecCtx, objects: Vec<Value>) -> Result<Applied, StepError> {
    let mut out = Applied::default();
    for (i, obj) in objects.into_iter().enumerate() {
        let (label, changed) = apply_status(ctx, obj)
            .await
            .map_err(|e| StepError::failed(format!("object {}: {e}", i + 1)))?;
        out.changed |= changed;
        out.objects.push(label);
    }
    Ok(out)
}

/// Server-side applies `obj`'s status to its status subresource (as `kubectl apply
/// --subresource=status`), to an object that exists: a status is never a way to create one.
/// Changed when the object's resourceVersion moved.
async fn apply_status(ctx: &ExecCtx, mut obj: Value) -> Result<(String, bool), StepError> {
    let text = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string);
    let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
        return Err(StepError::failed("manifest has no apiVersion or kind"));
    };
    let name = obj.pointer("/metadata/name").and_then(Value::as_str);
    let name = api::require_name("metadata.name", name.unwrap_or_default())?.to_string();
    let r = api::resolve(ctx, &api_version, &kind).await?;
    let given_ns = obj.pointer("/metadata/namespace").and_then(Value::as_str);
    let ns = api::namespace_for(ctx, &r, given_ns);
    if let (Some(ns), Some(meta)) = (&ns, obj.get_mut("metadata").and_then(Value::as_object_mut)) {
        meta.insert("namespace".into(), Value::String(ns.clone()));
    }
    let shown = api::display(&kind, ns.as_deref(), &name);
    let api = api::api_for(ctx, &r, ns.as_deref()).await?;
    let Some(before) = api::get_opt(ctx, &api, &r, &name, ns.as_deref()).await? else {
        return Err(StepError::failed(format!(
            "{shown} does not exist: subresource: status writes the status of an existing object"
        )));
    };
    let resource = format!("{}/status", r.ar.plural);
    let call = Call {
        verb: "patch",
        resource: &resource,
        name: &name,
        namespace: ns.as_deref(),
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let after = api
        .patch_status(&name, &params, &Patch::Apply(&obj))
        .await
        .map_err(|e| ctx.api_err(e, call))?;
    let changed = before.metadata.resource_version != after.metadata.resource_version;
    ctx.note(format!("applied the status of {shown}"));
    Ok((shown, changed))
}

/// `applied 3 objects (2 changed)`-style summary.
pub fn summary(a: &Applied) -> String {
    let n = a.objects.len();
    let noun = if n == 1 { "object" } else { "objects" };
    let state = if a.changed { "changed" } else { "unchanged" };
    format!("applied {n} {noun} ({state}): {}", a.objects.join(", "))
}

/// Applies objects in order; stops at the first failure.
pub async fn apply_objects(ctx: &ExecCtx, objects: Vec<Value>) -> Result<Applied, StepError> {
    let mut out = Applied::default();
    for (i, obj) in objects.into_iter().enumerate() {
        let (label, changed) = apply_one(ctx, obj)
            .await
            .map_err(|e| StepError::failed(format!("object {}: {e}", i + 1)))?;
        out.changed |= changed;
        out.objects.push(label);
    }
    Ok(out)
}

async fn apply_one(ctx: &ExecCtx, mut obj: Value) -> Result<(String, bool), StepError> {
    let text = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string);
    let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
        return Err(StepError::failed("manifest has no apiVersion or kind"));
    };
    let r = api::resolve(ctx, &api_version, &kind).await?;
    let given_ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    let ns = api::namespace_for(ctx, &r, given_ns.as_deref());
    if let (Some(ns), Some(meta)) = (&ns, obj.get_mut("metadata").and_then(Value::as_object_mut)) {
        meta.insert("namespace".into(), Value::String(ns.clone()));
    }
    let api = api::api_for(ctx, &r, ns.as_deref()).await?;
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_string);
    let (name, changed) = match name {
        Some(name) => {
            let before = api::get_opt(ctx, &api, &r, &name, ns.as_deref()).await?;
            let params = PatchParams::apply(FIELD_MANAGER).force();
            let after = api
                .patch(&name, &params, &Patch::Apply(&obj))
                .await
                .map_err(|e| ctx.api_err(e, api::call("patch", &r, &name, ns.as_deref())))?;
            let rv =
                |o: Option<&DynamicObject>| o.and_then(|o| o.metadata.resource_version.clone());
            (name, rv(before.as_ref()) != rv(Some(&after)))
        }
        None => {
            let dynobj: DynamicObject = serde_json::from_value(obj)
                .map_err(|e| StepError::failed(format!("manifest: {e}")))?;
            let created = api
                .create(&PostParams::default(), &dynobj)
                .await
                .map_err(|e| ctx.api_err(e, api::call("create", &r, "", ns.as_deref())))?;
            (created.metadata.name.unwrap_or_default(), true)
        }
    };
    ctx.note(format!(
        "applied {}",
        api::display(&kind, ns.as_deref(), &name)
    ));
    if is_crd(&r) {
        wait_established(ctx, &r, &name).await?;
    }
    Ok((api::display(&kind, ns.as_deref(), &name), changed))
}

fn is_crd(r: &Resolved) -> bool {
    r.ar.group == "apiextensions.k8s.io" && r.ar.kind == "CustomResourceDefinition"
}

/// Watches a just-applied CRD until Established=True, then forgets cached kinds so its kind is
/// discovered afresh by later objects.
async fn wait_established(ctx: &ExecCtx, r: &Resolved, name: &str) -> Result<(), StepError> {
    let api = api::api_for(ctx, r, None).await?;
    let wait = crate::watch::watch_until(ctx, api, api::call("get", r, name, None), |o| {
        let est = o
            .map(api::to_json)
            .and_then(|j| condition(&j, "Established"));
        Ok(Seen {
            done: est.as_deref() == Some("True"),
            note: format!(
                "CRD {name} Established={}",
                est.unwrap_or_else(|| "unknown".into())
            ),
        })
    });
    tokio::time::timeout(CRD_ESTABLISH_TIMEOUT, wait)
        .await
        .map_err(|_| StepError::failed(format!("CRD {name} did not become Established")))??;
    api::forget_kinds(ctx);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_summary_says_it_applied_statuses_and_names_the_objects() {
        let a = Applied {
            changed: false,
            objects: vec!["SecSynch/ops/a".into()],
        };
        assert_eq!(
            summary_of_status(&a),
            "applied the status of 1 object (unchanged): SecSynch/ops/a"
        );
        assert!(summary(&a).starts_with("applied 1 object (unchanged)"));
    }
}
