//! `suspend` and `resume`: `spec.suspend`, which holds a running run and keeps new runs from
//! starting; resuming continues the held run where it stopped.

use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::cluster::{flow, flows, status, Kube};

/// Sets `spec.suspend` of flow `name` to `suspend`.
pub async fn set(k: &Kube, name: &str, suspend: bool) -> anyhow::Result<()> {
    // A clear "not found" before patching.
    flow(k, name).await?;
    let patched = flows(&k.client, Some(&k.namespace))
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": suspend}})),
        )
        .await?;
    let verb = if suspend { "suspended" } else { "resumed" };
    outln!("pseudoflow.ops.example.com/{name} {verb}");
    let running = status(&patched).phase == Some(pseudoflow_crd::FlowPhase::Running);
    if suspend && running {
        outln!("note: the run in progress holds: its running steps finish, no new step starts until resume");
    }
    Ok(())
}
