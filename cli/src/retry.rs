//! `retry`: asks the controller for a retry of a flow's last run by setting
//! `ops.example.com/retry` (a fresh value) and `ops.example.com/retry-from`, the annotations
//! GitOps and automation set the same way; then waits for the controller's answer.

use std::time::Duration;

use anyhow::bail;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use pseudoflow_crd::{FlowPhase, RETRY_ANNOTATION, RETRY_FROM_ANNOTATION};
use serde_json::json;

use crate::cluster::{flow, flows, status, Kube};

/// How long to wait for the controller to start (or refuse) the retry.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Retries flow `name`'s last run from the failed step, or from step `from`.
pub async fn retry(k: &Kube, name: &str, from: Option<&str>) -> anyhow::Result<()> {
    let before = status(&flow(k, name).await?);
    let Some(run) = before.run.as_ref().map(|r| r.id.clone()) else {
        bail!("pseudoflow {name} has no run to retry yet");
    };
    match (before.phase, from) {
        (Some(FlowPhase::Running), _) => bail!(
            "run {run} of {name} is still running: retry once it has ended (kubectl pf get {name} -w)"
        ),
        (Some(FlowPhase::Succeeded), None) => bail!(
            "run {run} of {name} succeeded: nothing failed to retry (--from STEP runs a step and the steps after it again)"
        ),
        _ => {}
    }
    let token = k8s_openapi::jiff::Timestamp::now().to_string();
    flows(&k.client, Some(&k.namespace))
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                RETRY_ANNOTATION: token,
                RETRY_FROM_ANNOTATION: from,
            }}})),
        )
        .await?;
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    while tokio::time::Instant::now() < deadline {
        let now = status(&flow(k, name).await?);
        if let Some(new) = now
            .run
            .filter(|r| r.retry_of.as_deref() == Some(run.as_str()))
        {
            let at = new.retried_from.unwrap_or_default();
            outln!(
                "pseudoflow.ops.example.com/{name}: run {} retries run {run} from {at}",
                new.id
            );
            return Ok(());
        }
        if let Some(why) = refusal(k, name, &token).await? {
            bail!("the controller refused the retry: {why}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    outln!("pseudoflow.ops.example.com/{name}: retry of run {run} requested; the controller has not answered within {}s", ANSWER_WITHIN.as_secs());
    Ok(())
}

/// The message of the RetryRefused Event about flow `name` that answers retry `token`.
async fn refusal(k: &Kube, name: &str, token: &str) -> anyhow::Result<Option<String>> {
    let events = Api::<Event>::namespaced(k.client.clone(), &k.namespace)
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=PseudoFlow,involvedObject.name={name},reason=RetryRefused"
        )))
        .await?;
    let asked = format!("retry {token:?} refused: ");
    Ok(events
        .items
        .into_iter()
        .filter_map(|e| e.message)
        .find_map(|m| m.strip_prefix(&asked).map(str::to_string)))
}
