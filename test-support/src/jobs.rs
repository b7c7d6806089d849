//! The Jobs a run left behind: listed in the order they were made, and what each says about
//! itself (node, annotations, times, identity, pinned node).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::Client;

/// The Jobs in `ns`, oldest first.
pub async fn jobs(client: &Client, ns: &str) -> Vec<Job> {
    let mut items = Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    // Creation times have one-second resolution: within a second, a later attempt or loop item
    // comes later, and otherwise the name decides (it starts with the DAG node id).
    items.sort_by_key(|j| {
        let number = |key: &str| annotation(j, key).parse::<u64>().unwrap_or(u64::MAX);
        (
            j.metadata.creation_timestamp.clone().map(|t| t.0),
            number("ops.example.com/attempt"),
            number("ops.example.com/instance"),
            j.metadata.name.clone(),
        )
    });
    items
}

/// The DAG node a Job ran (its `ops.example.com/node-id` annotation).
pub fn job_node(j: &Job) -> String {
    annotation(j, "ops.example.com/node-id")
}

/// A Job annotation, "" when absent.
pub fn annotation(j: &Job, key: &str) -> String {
    j.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
        .unwrap_or_default()
}

/// Unix seconds a Job was created.
pub fn created(j: &Job) -> i64 {
    j.metadata
        .creation_timestamp
        .as_ref()
        .expect("created Jobs have a timestamp")
        .0
        .as_second()
}

/// Unix seconds a finished Job finished (its Complete or Failed condition), if it did.
pub fn finished(j: &Job) -> Option<i64> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_second())
}

/// The ServiceAccount a Job's pods run as.
pub fn service_account(j: &Job) -> Option<&str> {
    j.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .service_account_name
        .as_deref()
}

/// The node each node-pinned Job of `ns` was pinned to (`spec.template.spec.nodeName`).
pub async fn pinned_nodes(client: &Client, ns: &str) -> Vec<String> {
    Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|j| j.spec?.template.spec?.node_name)
        .collect()
}

/// Unix seconds the work of a finished Job ended: the latest `finishedAt` of its pods'
/// containers. The controller acts on a step's end as soon as its pod has terminated, which can
/// be before kube-controller-manager marks the Job Complete or Failed (under load, seconds
/// before), so "B started after A ended" is checked against this time, not the Job condition's.
pub async fn work_ended(client: &Client, j: &Job) -> Option<i64> {
    let ns = j.metadata.namespace.as_deref()?;
    let name = j.metadata.name.as_deref()?;
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .ok()?;
    pods.items
        .iter()
        .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref())
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0.as_second())
        .max()
}
