//! The `onDelete` finalizer: a flow with `spec.onDelete` carries it, so deleting the flow waits
//! until those steps ran (e.g. a backup before teardown), and the run-state Secret it keeps.
//! Set and removed through [`crate::flow::finalizer`].

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

pub use crate::flow::finalizer::ON_DELETE;
use crate::flow::finalizer::{has, set_named};
use crate::raw::RawFlow;

/// Whether the flow carries [`ON_DELETE`].
pub fn present(flow: &DynamicObject) -> bool {
    has(flow, ON_DELETE)
}

/// Adds (`on`) or removes [`ON_DELETE`].
pub async fn set(api: &Api<DynamicObject>, flow: &DynamicObject, on: bool) -> kube::Result<()> {
    set_named(api, flow, ON_DELETE, on).await
}

/// Removes [`ON_DELETE`] (the onDelete steps succeeded, or there are none to run), after
/// releasing the run-state Secret it kept ([`super::store::release`]).
pub async fn remove(api: &Api<DynamicObject>, flow: &DynamicObject) -> kube::Result<()> {
    if present(flow) {
        let ns = flow.namespace().unwrap_or_default();
        super::store::release(&api.clone().into_client(), &ns, &flow.name_any()).await?;
    }
    // Once the run state is released the collector may take it at any moment: the flow's own
    // finalizer must go now, not after a retried reconcile that would find no run state and run
    // onDelete again. The flow read by this reconcile is usually one status write behind: on a
    // conflict, read it again and remove the finalizer from what it is now.
    match set(api, flow, false).await {
        Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(&flow.name_any()).await? {
            Some(now) if now.metadata.uid == flow.metadata.uid => set(api, &now, false).await,
            _ => Ok(()),
        },
        other => other,
    }
}

/// Lets a flow that is being deleted go (drops [`ON_DELETE`]) when its onDelete steps cannot be
/// read, so none can run. Read raw, as the flow's spec cannot be decoded.
pub async fn let_go(client: &kube::Client, flow: &RawFlow) -> kube::Result<()> {
    let ours = flow.finalizers().iter().any(|f| f == ON_DELETE);
    if flow.metadata.deletion_timestamp.is_none() || !ours {
        return Ok(());
    }
    super::store::release(
        client,
        &flow.namespace().unwrap_or_default(),
        &flow.name_any(),
    )
    .await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    /// The run state is kept (finalizer on its Secret) exactly while onDelete steps may still
    /// need it: the flow holds the finalizer, or its spec has onDelete steps the controller is
    /// about to hold it for; never for bound or released flows, nor once deleted without it.
    #[test]
    fn the_run_state_is_held_while_on_delete_steps_may_run() {
        use crate::flow::finalizer::holds_state;
        let base = |meta: serde_json::Value, spec: serde_json::Value| {
            flow(
                json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
                        "metadata": meta, "spec": spec}),
            )
        };
        let steps = json!({"steps": [], "onDelete": [{"type": "sleep", "seconds": 1}]});
        assert!(holds_state(&base(
            json!({"name": "f", "finalizers": [ON_DELETE]}),
            json!({})
        )));
        assert!(holds_state(&base(json!({"name": "f"}), steps.clone())));
        assert!(!holds_state(&base(
            json!({"name": "f"}),
            json!({"steps": []})
        )));
        assert!(!holds_state(&base(
            json!({"name": "f", "deletionTimestamp": "2026-01-01T00:00:00Z"}),
            steps.clone()
        )));
        let mut bound = steps.clone();
        bound["bind"] = json!({"kind": "Node"});
        assert!(!holds_state(&base(json!({"name": "f"}), bound)));
        let released =
            json!({"name": "f", "annotations": {(pseudoflow_crd::bind::RELEASED_ANNOTATION): "x"}});
        assert!(!holds_state(&base(released, steps)));
    }
}
