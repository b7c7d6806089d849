//! Flows on the cluster: creating them, waiting for them by watching, re-running and deleting
//! them, and reading their status and Events.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::Client;
use serde_json::{json, Value};

use crate::apply;

/// The flows of `ns`, untyped (as the controller reads them).
pub fn flows(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::erase::<pseudoflow_crd::PseudoFlow>(&()),
    )
}

/// Creates (or updates) flow `name` with `spec`.
pub async fn create_flow(client: &Client, ns: &str, name: &str, spec: Value) {
    apply(client, json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {"name": name, "namespace": ns}, "spec": spec})).await;
}

/// Waits (by watching) until the flow's phase is final; returns its status.
pub async fn wait_done(client: &Client, ns: &str, name: &str, secs: u64) -> Value {
    wait_status(client, ns, name, secs, "a final phase", |st| {
        st["phase"] == "Succeeded" || st["phase"] == "Failed"
    })
    .await
}

/// Waits (by watching) until the flow's status satisfies `pred`; returns that status. Panics
/// with the last status seen after `secs`.
pub async fn wait_status(
    client: &Client,
    ns: &str,
    name: &str,
    secs: u64,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let done = |o: Option<&DynamicObject>| o.is_some_and(|f| pred(&f.data["status"]));
    match tokio::time::timeout(
        Duration::from_secs(secs),
        await_condition(flows(client, ns), name, done),
    )
    .await
    {
        Ok(f) => f.unwrap().unwrap().data["status"].clone(),
        Err(_) => {
            let last = flows(client, ns)
                .get(name)
                .await
                .map(|f| f.data["status"].clone())
                .unwrap_or_default();
            panic!("flow {name}: waited {secs}s for {what}; last status: {last:#}")
        }
    }
}

/// The status of one of the flow's standard conditions ("True"/"False", "" when absent).
pub fn cond(status: &Value, ty: &str) -> String {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == ty)
        .map(|c| c["status"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

/// The `status.steps` entry of the step at `path` (e.g. `spec.steps[1]`).
pub fn step<'a>(status: &'a Value, path: &str) -> &'a Value {
    status["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|e| e["path"] == path))
        .unwrap_or_else(|| panic!("no status.steps entry for {path}: {status:#}"))
}

/// The core v1 Events about flow `name`, oldest first by [`event_time`]: the order a user
/// reads them in (`kubectl get events --sort-by=.eventTime`). The API lists Events by name,
/// which says nothing of when they happened.
pub async fn flow_events(client: &Client, ns: &str, name: &str) -> Vec<Event> {
    let mut items = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=PseudoFlow,involvedObject.name={name}"
        )))
        .await
        .unwrap()
        .items;
    items.sort_by_key(event_time);
    items
}

/// When an Event first happened: its `eventTime` (microseconds; what events.k8s.io/v1 sets),
/// else its `firstTimestamp` (seconds, core v1's).
pub fn event_time(e: &Event) -> Option<Timestamp> {
    e.event_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| e.first_timestamp.as_ref().map(|t| t.0))
}

/// Sets the run annotation (`ops.example.com/run`) of flow `name`: a manual re-run.
pub async fn request_run(client: &Client, ns: &str, name: &str, value: &str) {
    flows(client, ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"ops.example.com/run": value}}})),
        )
        .await
        .unwrap();
}

/// Waits up to `secs` until flow `name` with `uid` is gone (its finalizer, if any, released).
pub async fn wait_gone(client: &Client, ns: &str, name: &str, uid: &str, secs: u64) {
    tokio::time::timeout(
        Duration::from_secs(secs),
        await_condition(flows(client, ns), name, conditions::is_deleted(uid)),
    )
    .await
    .unwrap_or_else(|_| panic!("flow {name} still there after {secs} s"))
    .unwrap();
}

/// Deletes flow `name` with `params` and waits up to `secs` until it is gone (its onDelete
/// steps, if any, ran).
pub async fn delete_flow(client: &Client, ns: &str, name: &str, params: &DeleteParams, secs: u64) {
    let api = flows(client, ns);
    let uid = api.get(name).await.unwrap().metadata.uid.unwrap();
    api.delete(name, params).await.unwrap();
    wait_gone(client, ns, name, &uid, secs).await;
}
