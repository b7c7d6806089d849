//! `approve` and `reject`: set `ops.example.com/approve=STEP` (or `ops.example.com/reject=STEP`)
//! on a flow, as `kubectl annotate` would, with the caller's own rights. The admission webhook
//! refuses it unless the caller may `approve` pseudoflows there, and records who decided; the
//! controller reads it (docs/steps.md, `approval`).

use kube::api::{Patch, PatchParams};
use serde_json::{json, Value};

use crate::cluster::{flow, flows, status, Kube};

/// The annotation that approves the approval step it names.
pub const APPROVE: &str = "ops.example.com/approve";
/// The annotation that rejects the approval step it names.
pub const REJECT: &str = "ops.example.com/reject";

fn annotate(key: &str, value: Value) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"annotations": {key: value}}}))
}

/// Approves (or, with `approve` false, rejects) step `step` of flow `name`.
pub async fn decide(k: &Kube, name: &str, step: &str, approve: bool) -> anyhow::Result<()> {
    let current = flow(k, name).await?;
    let key = if approve { APPROVE } else { REJECT };
    let api = flows(&k.client, Some(&k.namespace));
    let pp = PatchParams::default();
    let already = current
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .is_some_and(|v| v == step);
    if already {
        // Left from an earlier decision (an earlier run's): an unchanged annotation is no new
        // decision, so it is removed and set again.
        api.patch(name, &pp, &annotate(key, Value::Null)).await?;
    }
    api.patch(name, &pp, &annotate(key, json!(step))).await?;
    let verb = if approve { "approved" } else { "rejected" };
    println!("pseudoflow.ops.example.com/{name} step {step:?} {verb}");
    let waiting = status(&current).steps.iter().any(|s| {
        s.step_type == "approval"
            && s.name.as_deref() == Some(step)
            && s.phase == pseudoflow_crd::StepPhase::Running
    });
    if !waiting {
        println!(
            "note: step {step:?} is not waiting for approval now; the decision counts only for \
             a run in which it waits, from now on"
        );
    }
    Ok(())
}
