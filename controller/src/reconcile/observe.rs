//! Reading what a finished Job reported: the executor's [`StepResult`] from its pod's termination
//! message, or from the result ConfigMap the message names when the result was too large; sealed
//! under the run's key (`crd::protocol::sealed`), so neither place shows its variables.
//!
//! Names and labels are predictable, so nothing is trusted for its name alone: a Job counts only
//! if this flow object owns it, a pod only if that Job controls it, a result ConfigMap only if
//! its content has the digest the pod's termination message gives.

use std::collections::HashMap;

use crate::labels::{LABEL_FLOW, LABEL_RUN};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStateTerminated, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Preconditions, PropagationPolicy};
use pseudoflow_compiler::names::{content_digest, label_value};
use pseudoflow_crd::protocol::included::{classify, Classified};
use pseudoflow_crd::protocol::StepResult;

/// Whether `refs` name `uid` as their controller.
pub fn controlled_by(refs: &Option<Vec<OwnerReference>>, uid: &str) -> bool {
    !uid.is_empty()
        && refs
            .iter()
            .flatten()
            .any(|o| o.uid == uid && o.controller == Some(true))
}

/// The Jobs of one run of a flow, by name: one LIST per look instead of a GET per running step
/// (a fan-out over 100 nodes has 100 steps running at once). Served from the API server's watch
/// cache ("any" resource version): a consistent LIST waits for the cache to catch up with etcd
/// (about 100 ms since Kubernetes 1.31), on every step. A stale answer can only show a Job as
/// still running (the watch event it lags behind wakes the reconcile again); it never launches
/// anything, as launching does not read this list.
/// Jobs carrying this flow's labels but not owned by this flow object (planted, or left by an
/// earlier flow of the same name) are not in the answer.
pub async fn run_jobs(
    client: &kube::Client,
    ns: &str,
    flow: &str,
    flow_uid: &str,
    run_id: &str,
) -> kube::Result<HashMap<String, Job>> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let selector = format!("{LABEL_FLOW}={},{LABEL_RUN}={run_id}", label_value(flow));
    Ok(jobs
        .list(&ListParams::default().labels(&selector).match_any())
        .await?
        .items
        .into_iter()
        .filter(|j| controlled_by(&j.metadata.owner_references, flow_uid))
        .filter_map(|j| Some((j.metadata.name.clone()?, j)))
        .collect())
}

/// Whether Job `name` is gone for good (a consistent read, not the watch cache): deleted by
/// hand, by a TTL, or never there. A step whose Job is gone can never report.
pub async fn job_is_gone(client: &kube::Client, ns: &str, name: &str) -> kube::Result<bool> {
    Ok(Api::<Job>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?
        .is_none())
}

/// Deletes the Jobs matching `selector` that this flow object owns, each on the condition that
/// it is still the object that was listed (its uid): a run label alone never makes another
/// flow's Job deletable.
pub async fn delete_owned_jobs(
    client: &kube::Client,
    ns: &str,
    flow_uid: &str,
    selector: &str,
) -> kube::Result<()> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    for job in jobs
        .list(&ListParams::default().labels(selector))
        .await?
        .items
    {
        if controlled_by(&job.metadata.owner_references, flow_uid) {
            delete_job(&jobs, &job).await?;
        }
    }
    Ok(())
}

/// Deletes Job `name` if this flow object owns it (see [`delete_owned_jobs`]).
pub async fn delete_owned_job(
    client: &kube::Client,
    ns: &str,
    flow_uid: &str,
    name: &str,
) -> kube::Result<()> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    match jobs.get_opt(name).await? {
        Some(job) if controlled_by(&job.metadata.owner_references, flow_uid) => {
            delete_job(&jobs, &job).await
        }
        _ => Ok(()),
    }
}

/// Deletes `job` as [`run_jobs`] listed it (so owned by the flow), if it is still that object.
pub async fn delete_listed_job(client: &kube::Client, ns: &str, job: &Job) -> kube::Result<()> {
    delete_job(&Api::namespaced(client.clone(), ns), job).await
}

async fn delete_job(jobs: &Api<Job>, job: &Job) -> kube::Result<()> {
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid: job.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match jobs
        .delete(job.metadata.name.as_deref().unwrap_or_default(), &dp)
        .await
    {
        Ok(_) => Ok(()),
        // Already gone, or replaced by another object of that name: nothing of ours to delete.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The steps an `include` with a `secretRef` fetched, which its executor reported only by
/// reference: read from the Secret again, and accepted only if their SHA-256 is the digest of
/// what the flow's own identity read (so this reads nothing the flow could not). Errors never
/// quote the content.
pub async fn secret_steps(
    client: &kube::Client,
    ns: &str,
    name: &str,
    key: &str,
    sha256: &str,
) -> Result<serde_json::Value, SecretStepsError> {
    let at = || format!("Secret {ns}/{name}");
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|source| SecretStepsError::Read { at: at(), source })?
        .ok_or_else(|| SecretStepsError::Deleted(at()))?;
    let bytes = secret
        .data
        .and_then(|mut d| d.remove(key))
        .map(|b| b.0)
        .ok_or_else(|| SecretStepsError::NoKey(at(), key.to_string()))?;
    if content_digest(&bytes) != sha256 {
        return Err(SecretStepsError::Changed(at(), key.to_string()));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| SecretStepsError::NotText(at(), key.to_string()))?;
    match classify(
        &text,
        Some(pseudoflow_crd::steps::include::IncludeAs::Steps),
    ) {
        Ok(Classified::Steps(steps)) => Ok(steps),
        Ok(Classified::Manifests(_)) => Err(SecretStepsError::NoSteps),
        Err(e) => Err(SecretStepsError::Unreadable(e)),
    }
}

/// Why the steps an `include` fetched from a Secret are not taken (the step fails with it).
#[derive(Debug, thiserror::Error)]
pub enum SecretStepsError {
    /// The Secret could not be read again.
    #[error("reading {at} again: {source}")]
    Read { at: String, source: kube::Error },
    /// It is gone.
    #[error("{0} was deleted after it was fetched")]
    Deleted(String),
    /// It no longer has the key.
    #[error("{0} no longer has key {1:?}")]
    NoKey(String, String),
    /// Its content is not what the step fetched.
    #[error("{0} key {1:?} changed after the step fetched it; run again")]
    Changed(String, String),
    /// Its content is not text.
    #[error("{0} key {1:?} is not UTF-8 text")]
    NotText(String, String),
    /// It holds manifests, not steps.
    #[error("the included Secret key holds no steps")]
    NoSteps,
    /// It cannot be parsed.
    #[error("the included Secret key: {0}")]
    Unreadable(pseudoflow_crd::protocol::ClassifyError),
}

/// The outcome of `job`, or None while it runs. With `result_key` (the run seals results,
/// `crd::protocol::sealed`) only a result sealed under it for this Job counts as reported.
pub async fn job_result(
    client: &kube::Client,
    ns: &str,
    job: &Job,
    result_key: Option<&str>,
) -> kube::Result<Option<StepResult>> {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    // `FailureTarget` is the Job controller's verdict; it adds `Failed` only once the Job's pods
    // have terminated, which a pod on a dead node never does (it stays Terminating, and node
    // step pods tolerate every taint): waiting for `Failed` would hang the run.
    let done = conditions.iter().find(|c| {
        matches!(c.type_.as_str(), "Complete" | "Failed" | "FailureTarget") && c.status == "True"
    });
    let Some(done) = done else { return Ok(None) };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let job_uid = job.metadata.uid.clone().unwrap_or_default();
    let of_job =
        ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={job_uid}"));
    // From the watch cache first (see `run_jobs`); only if that does not show the pod's end yet,
    // a consistent read decides, so a lagging cache never turns into a failed step.
    let mut terminated = terminated_of(
        pods.list(&of_job.clone().match_any()).await?.items,
        &job_uid,
    );
    if terminated.is_none() {
        terminated = terminated_of(pods.list(&of_job).await?.items, &job_uid);
    }
    let Some(t) = terminated else {
        let why = done.reason.clone().unwrap_or_else(|| done.type_.clone());
        let node = pods
            .list(&of_job)
            .await?
            .items
            .into_iter()
            .find(|p| controlled_by(&p.metadata.owner_references, &job_uid))
            .and_then(|p| p.spec?.node_name);
        let on = node
            .map(|n| format!("; its pod on node {n} never reported an end (is the node down?)"))
            .unwrap_or_default();
        return Ok(Some(StepResult::failed(format!(
            "the step's Job ended without a result ({why}: {}){on}",
            done.message.clone().unwrap_or_default()
        ))));
    };
    let result = result_of(&t);
    let result = match result.result_config_map.clone() {
        Some(cm_name) => large_result(client, ns, &cm_name, &result).await?,
        None => result,
    };
    let name = job.metadata.name.as_deref().unwrap_or_default();
    Ok(Some(match result_key {
        Some(key) => result.opened(key, name),
        None => result,
    }))
}

/// The result the executor wrote to its termination message, or why there is none (with the
/// message's end, which is the log's tail when the executor did not write one).
fn result_of(t: &ContainerStateTerminated) -> StepResult {
    let message = t.message.clone().unwrap_or_default();
    serde_json::from_str(&message).unwrap_or_else(|_| {
        let tail: String = message
            .chars()
            .rev()
            .take(500)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        StepResult::failed(format!(
            "the executor exited with code {} without a result: {tail}",
            t.exit_code
        ))
    })
}

/// A result too large for a termination message, from the ConfigMap `cm_name` that `reported`
/// names: accepted only with the SHA-256 the termination message gave, so a ConfigMap changed
/// after the step wrote it is not believed.
async fn large_result(
    client: &kube::Client,
    ns: &str,
    cm_name: &str,
    reported: &StepResult,
) -> kube::Result<StepResult> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let full = cms
        .get_opt(cm_name)
        .await?
        .and_then(|c| c.data)
        .and_then(|d| d.get("result.json").cloned());
    let expected = reported.result_sha256.clone().unwrap_or_default();
    Ok(match full {
        Some(t) if content_digest(t.as_bytes()) != expected => StepResult::failed(format!(
            "the result ConfigMap {cm_name} does not hold what the step reported (its \
             SHA-256 differs from the one in the pod's termination message): it was changed \
             after the step wrote it"
        )),
        Some(t) => serde_json::from_str(&t).unwrap_or_else(|_| {
            StepResult::failed(format!("the result ConfigMap {cm_name} is unreadable"))
        }),
        None => StepResult::failed(format!("the result ConfigMap {cm_name} is missing")),
    })
}

/// How the Job's pod ended, if it did (its first container; of pods the Job controls). Of
/// several (a pod whose container never started is replaced, see
/// `pseudoflow_compiler::lower::START_RETRIES`): one whose process ran, the latest to finish.
fn terminated_of(pods: Vec<Pod>, job_uid: &str) -> Option<ContainerStateTerminated> {
    pods.into_iter()
        .filter(|p| controlled_by(&p.metadata.owner_references, job_uid))
        .filter_map(|p| {
            p.status?
                .container_statuses?
                .into_iter()
                .next()?
                .state?
                .terminated
        })
        .max_by_key(|t| {
            let ran = t.exit_code != pseudoflow_compiler::lower::START_ERROR_EXIT_CODE;
            (ran, t.finished_at.clone().map(|f| f.0))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(job_uid: &str, exit_code: i32, finished: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                "name": "j", "uid": job_uid, "controller": true}]},
            "status": {"containerStatuses": [{"name": "step", "image": "i", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": exit_code, "finishedAt": finished}}}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_pod_that_ran_decides_over_one_whose_container_never_started() {
        let never_started = pod("u", 128, "2026-01-01T00:00:05Z");
        let ran = pod("u", 0, "2026-01-01T00:00:03Z");
        let other_job = pod("v", 1, "2026-01-01T00:00:09Z");
        let t = terminated_of(vec![never_started.clone(), ran, other_job], "u").unwrap();
        assert_eq!(t.exit_code, 0);
        // Of pods that ran, the latest to finish; with none, the one that never started.
        let earlier = pod("u", 1, "2026-01-01T00:00:01Z");
        let later = pod("u", 1, "2026-01-01T00:00:02Z");
        let t = terminated_of(vec![later, earlier], "u").unwrap();
        assert_eq!(t.finished_at.unwrap().0.to_string(), "2026-01-01T00:00:02Z");
        assert_eq!(
            terminated_of(vec![never_started], "u").unwrap().exit_code,
            128
        );
    }
}
