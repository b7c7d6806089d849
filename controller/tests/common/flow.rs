//! Setup and observation helpers the flow tests share: a namespace with a flow ServiceAccount and
//! an in-process controller, creating flows, waiting for runs by watching, and reading what a run
//! left behind (status, Jobs, Events).
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::reconcile::flow_resource;
use pseudoflow_controller::{run_controller, Context};
use serde_json::{json, Value};

use super::{env, IMAGE};

/// Server-side applies one object.
pub async fn apply(client: &Client, v: Value) {
    pseudoflow_testenv::apply::apply_value(client, v, None)
        .await
        .unwrap();
}

/// Installs (or updates) the PseudoFlow CRD and waits until it is served.
pub async fn install_crd(client: &Client) {
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&pseudoflow_crd::schema::crd_yaml()).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        "pseudoflows.ops.example.com",
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(
            crds,
            "pseudoflows.ops.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
}

/// A namespace with ServiceAccount `flow` allowed `rules` there and `cluster_rules` cluster-wide
/// (no controller yet).
pub async fn prepare(prefix: &str, rules: Value, cluster_rules: Value) -> (Client, String) {
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = env.namespace(prefix).await.unwrap();
    apply(&client, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "flow", "namespace": ns}})).await;
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "flow", "namespace": ns}, "rules": rules})).await;
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "flow", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flow"}, "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]})).await;
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": format!("flow-{ns}")}, "rules": cluster_rules})).await;
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": format!("flow-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("flow-{ns}")}, "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]})).await;
    (client, ns)
}

/// [`prepare`] plus a controller for that namespace running on this test's runtime.
pub async fn setup(
    prefix: &str,
    rules: Value,
    cluster_rules: Value,
) -> (Client, String, tokio::task::JoinHandle<()>) {
    let (client, ns) = prepare(prefix, rules, cluster_rules).await;
    let handle = start_controller(&client, &ns);
    (client, ns, handle)
}

/// A controller for `ns` with metrics nobody reads.
pub fn start_controller(client: &Client, ns: &str) -> tokio::task::JoinHandle<()> {
    start_controller_with(client, ns, Arc::new(Metrics::default()))
}

/// A controller for `ns` recording into `metrics`; it allows node steps nowhere, as the binary
/// started without `--node-step-namespaces`.
pub fn start_controller_with(
    client: &Client,
    ns: &str,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
    let ctx = Arc::new(Context::new(client.clone(), IMAGE.into(), metrics));
    tokio::spawn(run_controller(ctx, Some(ns.to_string())))
}

/// A controller for `ns` whose `--node-step-namespaces` are `node_step_namespaces`: the
/// controller's half of the node-step opt-in (docs/security.md).
pub fn start_controller_allowing(
    client: &Client,
    ns: &str,
    node_step_namespaces: &[&str],
) -> tokio::task::JoinHandle<()> {
    let ctx = Context::new(client.clone(), IMAGE.into(), Arc::new(Metrics::default()))
        .with_node_step_namespaces(node_step_namespaces.iter().copied().collect());
    let ctx = Arc::new(ctx);
    tokio::spawn(run_controller(ctx, Some(ns.to_string())))
}

/// Labels `ns` `pod-security.kubernetes.io/enforce=privileged`: the namespace's half of the
/// node-step opt-in, which Pod Security admission also needs to admit node pods.
pub async fn label_privileged(client: &Client, ns: &str) {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})),
        )
        .await
        .unwrap();
}

/// Both halves of the node-step opt-in for `ns` (the label and the controller's allow-list),
/// then a controller for it: how a test that runs node steps starts its controller.
pub async fn start_node_controller(client: &Client, ns: &str) -> tokio::task::JoinHandle<()> {
    label_privileged(client, ns).await;
    start_controller_allowing(client, ns, &[ns])
}

/// The flows of `ns`, untyped (as the controller reads them).
pub fn flows(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &flow_resource())
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

/// The core v1 Events about flow `name`, oldest first.
pub async fn flow_events(client: &Client, ns: &str, name: &str) -> Vec<Event> {
    let mut items = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=PseudoFlow,involvedObject.name={name}"
        )))
        .await
        .unwrap()
        .items;
    items.sort_by_key(|e| {
        e.event_time
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.first_timestamp.as_ref().map(|t| t.0))
    });
    items
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
