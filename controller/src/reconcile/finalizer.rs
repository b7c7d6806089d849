//! The `onDelete` finalizer: a flow with `spec.onDelete` carries it, so deleting the flow waits
//! until those steps ran (e.g. a backup before teardown). Set and removed with a merge patch guarded
//! by the resourceVersion, so another controller's finalizer is never lost.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::raw::RawFlow;

/// The finalizer the controller puts on flows with `onDelete` steps.
pub const ON_DELETE: &str = "ops.example.com/on-delete";

/// Whether the flow carries [`ON_DELETE`].
pub fn present(flow: &DynamicObject) -> bool {
    has(flow, ON_DELETE)
}

/// Whether `obj` (a flow, or an object of a bound kind) carries the finalizer `name`.
pub fn has(obj: &DynamicObject, name: &str) -> bool {
    obj.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == name))
}

/// Adds (`on`) or removes [`ON_DELETE`].
pub async fn set(api: &Api<DynamicObject>, flow: &DynamicObject, on: bool) -> kube::Result<()> {
    set_named(api, flow, ON_DELETE, on).await
}

/// Adds (`on`) or removes the finalizer `name` of `obj` (a flow, or an object of a bound kind).
pub async fn set_named(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    name: &str,
    on: bool,
) -> kube::Result<()> {
    let current = obj.metadata.finalizers.clone().unwrap_or_default();
    let mut next: Vec<String> = current.iter().filter(|f| *f != name).cloned().collect();
    if on {
        next.push(name.to_string());
    }
    if next == current {
        return Ok(());
    }
    // A merge patch replaces the list; the resourceVersion makes it fail (and the reconcile
    // retry) if someone changed the object meanwhile, so no other finalizer is lost.
    let patch = json!({"metadata": {
        "finalizers": next,
        "resourceVersion": obj.metadata.resource_version,
    }});
    let obj_name = obj.metadata.name.clone().unwrap_or_default();
    api.patch(&obj_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Removes [`ON_DELETE`] (the onDelete steps succeeded, or there are none to run).
pub async fn remove(api: &Api<DynamicObject>, flow: &DynamicObject) -> kube::Result<()> {
    set(api, flow, false).await
}

/// Lets a flow that is being deleted go (drops [`ON_DELETE`]) when its onDelete steps cannot be
/// read, so none can run. Read raw, as the flow's spec cannot be decoded.
pub async fn let_go(client: &kube::Client, flow: &RawFlow) -> kube::Result<()> {
    let ours = flow.finalizers().iter().any(|f| f == ON_DELETE);
    if flow.metadata.deletion_timestamp.is_none() || !ours {
        return Ok(());
    }
    let rest: Vec<&String> = flow
        .finalizers()
        .iter()
        .filter(|f| *f != ON_DELETE)
        .collect();
    // Guarded by the resourceVersion, so another controller's finalizer is never lost.
    let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": flow.metadata.resource_version}});
    Api::<RawFlow>::namespaced(client.clone(), &flow.namespace().unwrap_or_default())
        .patch(
            &flow.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}
