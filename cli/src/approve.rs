//! `approve` and `reject`: set `ops.example.com/approve=STEP` (or `ops.example.com/reject=STEP`)
//! on a flow, as `kubectl annotate` would, with the caller's own rights. The admission webhook
//! refuses it unless the caller may `approve` pseudoflows there, and records who decided; the
//! controller reads it (docs/steps.md, `approval`). A decision is for the run the step waits in
//! as read: `--run` names it, and the patch carries the flow's resourceVersion, so it fails
//! (409) if the flow changed before it landed.

use kube::api::{DynamicObject, Patch, PatchParams};
use pseudoflow_crd::{APPROVE_ANNOTATION, REJECT_ANNOTATION};
use serde_json::{json, Value};

use crate::cluster::{flow, flows, status, Kube};

/// A merge patch setting (or, with null, removing) annotation `key`, applied only to the flow
/// as it was at `resource_version` (else the API server answers 409 Conflict).
fn annotate(key: &str, value: Value, resource_version: &str) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {
        "resourceVersion": resource_version,
        "annotations": {key: value},
    }}))
}

/// The run in which step `step` of `flow` waits for a decision now, or why there is none.
fn waiting_run(flow: &DynamicObject, step: &str) -> anyhow::Result<String> {
    let st = status(flow);
    let run = st.run.as_ref().map(|r| r.id.clone()).unwrap_or_default();
    let waiting = st.steps.iter().any(|s| {
        s.step_type == "approval"
            && s.name.as_deref() == Some(step)
            && s.phase == pseudoflow_crd::StepPhase::Running
    });
    if waiting && !run.is_empty() {
        return Ok(run);
    }
    let name = flow.metadata.name.as_deref().unwrap_or_default();
    match run.as_str() {
        "" => anyhow::bail!("pseudoflow {name:?} has no run: step {step:?} is not waiting"),
        run => anyhow::bail!(
            "step {step:?} is not waiting for approval in run {run} of pseudoflow {name:?}: a \
             decision counts only for a run in which it waits"
        ),
    }
}

/// Approves (or, with `approve` false, rejects) step `step` of flow `name` in the run it waits
/// in now, which must be `run` when one is named. Each patch applies only to the flow as read
/// and checked (its resourceVersion), so a decision never lands on a run other than the one
/// shown.
pub async fn decide(
    k: &Kube,
    name: &str,
    step: &str,
    approve: bool,
    run: Option<&str>,
) -> anyhow::Result<()> {
    let current = flow(k, name).await?;
    let verb = if approve { "approved" } else { "rejected" };
    let waiting = waiting_run(&current, step)?;
    if let Some(want) = run.filter(|r| *r != waiting) {
        anyhow::bail!(
            "run {want} is not the run of pseudoflow {name:?} now: step {step:?} waits in run \
             {waiting}; nothing {verb}"
        );
    }
    let key = if approve {
        APPROVE_ANNOTATION
    } else {
        REJECT_ANNOTATION
    };
    let already = current
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .is_some_and(|v| v == step);
    let d = Decision {
        k,
        name,
        step,
        run: &waiting,
        verb,
    };
    if already {
        // Left from an earlier decision (an earlier run's): an unchanged annotation is no new
        // decision, so it is removed and set again.
        d.patch(key, Value::Null).await?;
    }
    d.patch(key, json!(step)).await?;
    outln!("pseudoflow.ops.example.com/{name} step {step:?} of run {waiting} {verb}");
    Ok(())
}

/// A decision on one step, for one run.
struct Decision<'a> {
    k: &'a Kube,
    name: &'a str,
    step: &'a str,
    run: &'a str,
    verb: &'a str,
}

/// Attempts at a patch when the flow changes in between (the controller writes status).
const ATTEMPTS: usize = 5;

impl Decision<'_> {
    /// Sets annotation `key` to `value`: read the flow, check the step still waits in the same
    /// run, patch with that resourceVersion; a flow changed meanwhile (409) is read and checked
    /// again. A step no longer waiting in that run fails it.
    async fn patch(&self, key: &str, value: Value) -> anyhow::Result<()> {
        let (name, step, run, verb) = (self.name, self.step, self.run, self.verb);
        let api = flows(&self.k.client, Some(&self.k.namespace));
        for _ in 0..ATTEMPTS {
            let current = flow(self.k, name).await?;
            let now = waiting_run(&current, step)?;
            if now != run {
                anyhow::bail!(
                    "pseudoflow {name:?} changed since it was read: step {step:?} now waits in \
                     run {now}, not {run}; nothing {verb}; look again and decide again"
                );
            }
            let rv = current.metadata.resource_version.unwrap_or_default();
            let patch = annotate(key, value.clone(), &rv);
            match api.patch(name, &PatchParams::default(), &patch).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(e.into()),
            }
        }
        anyhow::bail!(
            "pseudoflow {name:?} kept changing while step {step:?} was being decided: nothing \
             {verb}; try again"
        )
    }
}
