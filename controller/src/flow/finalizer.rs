//! Finalizers on a flow or on an object of a bound kind, as both reconcilers set them: added and
//! removed with a merge patch guarded by the resourceVersion, so another controller's finalizer
//! is never lost.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

/// The finalizer the controller puts on flows with `onDelete` steps; their run-state Secret
/// carries it too (`reconcile/on_delete.rs` sets it, `reconcile/store.rs` keeps the Secret by
/// it), so both name it here rather than each other.
pub const ON_DELETE: &str = "ops.example.com/on-delete";

/// Whether the flow's run state must outlive a foreground deletion of the flow: it carries
/// [`ON_DELETE`], or (not yet deleted) its spec has onDelete steps the next reconcile will hold
/// it for. Read raw, before the finalizer is written back into this snapshot.
pub fn holds_state(flow: &DynamicObject) -> bool {
    let steps = flow.data["spec"]["onDelete"]
        .as_array()
        .is_some_and(|s| !s.is_empty());
    let bound = !flow.data["spec"]["bind"].is_null() || crate::flow::released(flow);
    has(flow, ON_DELETE) || (flow.metadata.deletion_timestamp.is_none() && steps && !bound)
}

/// Whether `obj` (a flow, or an object of a bound kind) carries the finalizer `name`.
pub fn has(obj: &DynamicObject, name: &str) -> bool {
    obj.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == name))
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

/// The garbage collector's finalizer while it deletes an object's dependents (foreground
/// propagation).
pub const FOREGROUND: &str = "foregroundDeletion";

/// Whether a foreground deletion of the flow is still deleting its dependents: new Jobs owned
/// by it now would be deleted with them.
pub fn foreground_pending(flow: &DynamicObject) -> bool {
    flow.metadata.deletion_timestamp.is_some() && has(flow, FOREGROUND)
}
