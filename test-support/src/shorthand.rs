//! Shorthands the tests of step options share (the control-flow suite's modules and the
//! metrics tests): the flow's ConfigMap rights, steps that leave a ConfigMap or run a command,
//! a condition on a ConfigMap, the Jobs and run ids of one flow.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::Client;
use pseudoflow_compiler::names::run_id;
use serde_json::{json, Value};

use crate::{flows, job_node, jobs};

/// What the flows of these tests may do in their namespace: ConfigMaps, read and write.
pub fn cm_rules() -> Value {
    json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}])
}

/// A step that creates ConfigMap `name` (an apply, so an executor Job).
pub fn mark(ns: &str, name: &str) -> Value {
    json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}})
}

/// A step that runs `cmd` with `sh -c` in its Job.
pub fn exec(cmd: &str) -> Value {
    json!({"type": "exec", "cmd": cmd})
}

/// A condition on ConfigMap `switch`'s `data.mode`.
pub fn mode_is(ns: &str, value: &str) -> Value {
    json!({"resource": {"kind": "ConfigMap", "name": "switch", "namespace": ns}, "jsonPath": "{.data.mode}", "op": "equals", "value": value})
}

/// The ConfigMap `name` in `ns`, if it exists.
pub async fn cm(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// The Jobs flow `flow` created, oldest first.
pub async fn flow_jobs(client: &Client, ns: &str, flow: &str) -> Vec<Job> {
    jobs(client, ns)
        .await
        .into_iter()
        .filter(|j| {
            j.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("ops.example.com/flow"))
                .is_some_and(|f| f == flow)
        })
        .collect()
}

/// The run a Job belongs to (its `ops.example.com/run` label).
pub fn run_label(j: &Job) -> String {
    j.metadata.labels.as_ref().unwrap()["ops.example.com/run"].clone()
}

/// The node each of `jobs` ran on, in order.
pub fn nodes_of(jobs: &[Job]) -> Vec<String> {
    jobs.iter().map(job_node).collect()
}

/// A status's `message`, empty when it has none.
pub fn message(status: &Value) -> &str {
    status["message"].as_str().unwrap_or_default()
}

/// The id the controller gives the run of flow `name`'s current generation with `trigger`.
pub async fn run_id_now(client: &Client, ns: &str, name: &str, trigger: &str) -> String {
    let flow = flows(client, ns).get(name).await.unwrap();
    run_id(
        flow.metadata.uid.as_deref().unwrap(),
        flow.metadata.generation.unwrap(),
        Some(trigger),
    )
}
