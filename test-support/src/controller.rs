//! A namespace with a flow ServiceAccount on the shared cluster and an in-process controller
//! for it, with or without the node-step opt-in.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{run_controller, Context};
use serde_json::{json, Value};

use crate::{env, install_crd, FlowNamespace, IMAGE};

/// A namespace with ServiceAccount `flow` allowed `rules` there and `cluster_rules` cluster-wide
/// (no controller yet).
pub async fn prepare(prefix: &str, rules: Value, cluster_rules: Value) -> (Client, String) {
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = FlowNamespace::new(prefix)
        .rules(rules)
        .cluster_rules(cluster_rules)
        .create(env, &client)
        .await;
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
    let (client, ns) = (client.clone(), ns.to_string());
    tokio::spawn(async move {
        let ctx = Context::new(client, IMAGE.into(), metrics).with_config(admin_config().await);
        run_controller(Arc::new(ctx), Some(ns)).await
    })
}

/// A controller for `ns` holding the approval `key`, as the chart's controller holds the one in
/// its namespace's Secret: it seals served marks and the progress records of object runs (a flow
/// recorded in its objects runs no step that is not safe to repeat without one).
pub fn start_controller_with_key(
    client: &Client,
    ns: &str,
    key: pseudoflow_controller::approval::Key,
) -> tokio::task::JoinHandle<()> {
    let (client, ns) = (client.clone(), ns.to_string());
    tokio::spawn(async move {
        let ctx = Context::new(client, IMAGE.into(), Arc::new(Metrics::default()))
            .with_config(admin_config().await)
            .with_approval_key(key);
        run_controller(Arc::new(ctx), Some(ns)).await
    })
}

/// The client configuration of testenv's admin: what the in-process controller derives the
/// clients of bound flows' ServiceAccounts from (docs/bound-flows.md).
pub async fn admin_config() -> kube::Config {
    let kubeconfig = kube::config::Kubeconfig::read_from(env().kubeconfig_path()).unwrap();
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap()
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
