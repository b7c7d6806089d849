//! Reading what a finished Job reported: the executor's [`StepResult`] from its pod's termination
//! message, or from the result ConfigMap the message names when the result was too large.

use std::collections::HashMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStateTerminated, Pod};
use kube::api::{Api, ListParams};
use pseudoflow_compiler::lower::{LABEL_FLOW, LABEL_RUN};
use pseudoflow_compiler::names::label_value;
use pseudoflow_compiler::result::StepResult;

/// The Jobs of one run of a flow, by name: one LIST per look instead of a GET per running step
/// (a fan-out over 100 nodes has 100 steps running at once). Served from the API server's watch
/// cache ("any" resource version): a consistent LIST waits for the cache to catch up with etcd
/// (about 100 ms since Kubernetes 1.31), on every step. A stale answer can only show a Job as
/// still running (the watch event it lags behind wakes the reconcile again); it never launches
/// anything, as launching does not read this list.
pub async fn run_jobs(
    client: &kube::Client,
    ns: &str,
    flow: &str,
    run_id: &str,
) -> kube::Result<HashMap<String, Job>> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let selector = format!("{LABEL_FLOW}={},{LABEL_RUN}={run_id}", label_value(flow));
    Ok(jobs
        .list(&ListParams::default().labels(&selector).match_any())
        .await?
        .items
        .into_iter()
        .filter_map(|j| Some((j.metadata.name.clone()?, j)))
        .collect())
}

/// The outcome of `job`, or None while it runs.
pub async fn job_result(
    client: &kube::Client,
    ns: &str,
    job: &Job,
) -> kube::Result<Option<StepResult>> {
    let job_name = job.metadata.name.as_deref().unwrap_or_default();
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let done = conditions
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True");
    let Some(done) = done else { return Ok(None) };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let of_job = ListParams::default().labels(&format!("job-name={job_name}"));
    // From the watch cache first (see `run_jobs`); only if that does not show the pod's end yet,
    // a consistent read decides, so a lagging cache never turns into a failed step.
    let mut terminated = terminated_of(pods.list(&of_job.clone().match_any()).await?.items);
    if terminated.is_none() {
        terminated = terminated_of(pods.list(&of_job).await?.items);
    }
    let Some(t) = terminated else {
        let why = done.reason.clone().unwrap_or_else(|| done.type_.clone());
        return Ok(Some(StepResult::failed(format!(
            "the step's Job ended without a result ({why}: {})",
            done.message.clone().unwrap_or_default()
        ))));
    };
    let message = t.message.unwrap_or_default();
    let mut result: StepResult = match serde_json::from_str(&message) {
        Ok(r) => r,
        Err(_) => {
            let tail: String = message
                .chars()
                .rev()
                .take(500)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Ok(Some(StepResult::failed(format!(
                "the executor exited with code {} without a result: {tail}",
                t.exit_code
            ))));
        }
    };
    if let Some(cm_name) = result.result_config_map.clone() {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let full = cms
            .get_opt(&cm_name)
            .await?
            .and_then(|c| c.data)
            .and_then(|d| d.get("result.json").cloned());
        result = match full.and_then(|t| serde_json::from_str(&t).ok()) {
            Some(r) => r,
            None => StepResult::failed(format!(
                "the result ConfigMap {cm_name} is missing or unreadable"
            )),
        };
    }
    Ok(Some(result))
}

/// How the (first) container of the Job's pod ended, if it did.
fn terminated_of(pods: Vec<Pod>) -> Option<ContainerStateTerminated> {
    pods.into_iter()
        .next()
        .and_then(|p| p.status)
        .and_then(|s| s.container_statuses)
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.state)
        .and_then(|s| s.terminated)
}
