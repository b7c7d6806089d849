//! `run` and `stop`: start a run now, or end a running one, by the annotations GitOps and
//! automation set the same way (`ops.example.com/run`, `ops.example.com/stop`); then wait for the
//! controller's answer in status.

use std::time::Duration;

use anyhow::bail;
use kube::api::{Patch, PatchParams};
use pseudoflow_crd::{FlowPhase, PseudoFlowStatus, RUN_ANNOTATION, STOP_ANNOTATION};
use serde_json::json;

use crate::cluster::{flow, flows, status, Kube};

/// How long to wait for the controller to act.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Starts a run of flow `name` now (a fresh `ops.example.com/run` value), as `kubectl create
/// job --from` does for a CronJob; `concurrencyPolicy` decides about a run still running.
pub async fn run(k: &Kube, name: &str) -> anyhow::Result<()> {
    let f = flow(k, name).await?;
    let spec = &f.data["spec"];
    if spec["includeOnly"] == true {
        bail!("pseudoflow {name} is a library (includeOnly): it runs only in the flows that include it");
    }
    if spec["suspend"] == true {
        bail!("pseudoflow {name} is suspended: no run starts until kubectl pf resume {name}");
    }
    let before = status(&f);
    let token = k8s_openapi::jiff::Timestamp::now().to_string();
    annotate(k, name, RUN_ANNOTATION, &token).await?;
    let answer = wait(k, name, |now| {
        if let Some(run) = now
            .run
            .as_ref()
            .filter(|r| r.trigger.as_deref() == Some(&token))
        {
            return Some(format!("run {} started", run.id));
        }
        let queued = now.queued_run.as_ref().map(|q| &q.id);
        (queued.is_some() && queued != before.queued_run.as_ref().map(|q| &q.id)).then(|| {
            format!(
                "run {} queued behind run {} (concurrencyPolicy Forbid)",
                queued.unwrap(),
                now.run.as_ref().map(|r| r.id.as_str()).unwrap_or_default()
            )
        })
    })
    .await?;
    match answer {
        Some(said) => outln!("pseudoflow.ops.example.com/{name}: {said}"),
        None => outln!("pseudoflow.ops.example.com/{name}: run requested ({RUN_ANNOTATION}={token}); the controller has not started it within {}s", ANSWER_WITHIN.as_secs()),
    }
    Ok(())
}

/// Ends run `run` of flow `name` (by default its current run, which must be running): its
/// running Jobs deleted, no further step started, the run Aborted.
pub async fn stop(k: &Kube, name: &str, run: Option<&str>) -> anyhow::Result<()> {
    let before = status(&flow(k, name).await?);
    let current = before.run.as_ref().map(|r| r.id.clone());
    let id = match (run, &current) {
        (Some(id), _) => id.to_string(),
        (None, Some(id)) if before.phase == Some(FlowPhase::Running) => id.clone(),
        (None, Some(id)) => bail!(
            "run {id} of {name} is not running ({}): nothing to stop",
            phase_name(&before)
        ),
        (None, None) => bail!("pseudoflow {name} has no run to stop"),
    };
    annotate(k, name, STOP_ANNOTATION, &id).await?;
    let answer = wait(k, name, |now| {
        let run = now.run.as_ref().filter(|r| r.id == id)?;
        (now.phase == Some(FlowPhase::Aborted)).then(|| format!("run {} aborted", run.id))
    })
    .await?;
    match answer {
        Some(said) => outln!("pseudoflow.ops.example.com/{name}: {said}"),
        None => outln!("pseudoflow.ops.example.com/{name}: stop of run {id} requested ({STOP_ANNOTATION}={id}); not Aborted within {}s", ANSWER_WITHIN.as_secs()),
    }
    Ok(())
}

fn phase_name(s: &PseudoFlowStatus) -> String {
    s.phase
        .map(|p| format!("{p:?}"))
        .unwrap_or_else(|| "no phase".into())
}

async fn annotate(k: &Kube, name: &str, key: &str, value: &str) -> anyhow::Result<()> {
    flows(&k.client, Some(&k.namespace))
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
        )
        .await?;
    Ok(())
}

/// Polls flow `name`'s status until `done` says something, for [`ANSWER_WITHIN`].
async fn wait(
    k: &Kube,
    name: &str,
    done: impl Fn(&PseudoFlowStatus) -> Option<String>,
) -> anyhow::Result<Option<String>> {
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    while tokio::time::Instant::now() < deadline {
        if let Some(said) = done(&status(&flow(k, name).await?)) {
            return Ok(Some(said));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(None)
}
