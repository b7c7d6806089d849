//! Running the seed's example flows (`examples/*.yaml`, as written) on the shared cluster: the
//! cluster prepared as the demo prepares it, a controller allowed to run node steps in
//! kube-system, applying a flow and waiting for its run. Shared by
//! `examples/nodelocaldns_and_apiserver_vip.rs` and `steps_node/nodelocaldns_removal.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::runtime::wait::await_condition;
use kube::Client;
use pseudoflow_controller::flow::flow_resource;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{run_controller, Context};
use serde_json::{json, Value};

use crate::{env, label_privileged, IMAGE};

/// The repository's root, where the example flows and their artifacts are.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Applies every object of a YAML text (server-side).
pub async fn apply_text(client: &Client, text: &str) {
    pseudoflow_testenv::apply::apply_text(client, text, None)
        .await
        .unwrap();
}

/// Prepares the shared cluster for the seed flows as the demo does
/// ([`pseudoflow_testenv::seed::prepare`]): the CRDs they use, the artifact ConfigMap they
/// read, kubeadm's files on every node, and cluster-admin for the `default` ServiceAccount
/// they run as (they name none).
pub async fn prepare_seed_cluster(client: &Client) {
    pseudoflow_testenv::seed::prepare(env(), client, repo())
        .await
        .unwrap();
}

/// A controller for kube-system, where the seed flows run node steps: the namespace is
/// labelled privileged and allow-listed (both halves of the opt-in).
pub async fn start_seed_controller(client: &Client) -> tokio::task::JoinHandle<()> {
    label_privileged(client, "kube-system").await;
    let ctx = Context::new(client.clone(), IMAGE.into(), Arc::new(Metrics::default()))
        .with_node_step_namespaces(["kube-system"].into_iter().collect());
    tokio::spawn(run_controller(Arc::new(ctx), Some("kube-system".into())))
}

/// Waits (watching) for the run of kube-system's flow `name` started by `trigger` (or any run)
/// to finish; returns the flow's status.
pub async fn wait_seed_flow(client: &Client, name: &str, trigger: Option<&str>) -> Value {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "kube-system", &flow_resource());
    let trig = trigger.map(str::to_string);
    let done = move |o: Option<&DynamicObject>| {
        o.is_some_and(|f| {
            let st = &f.data["status"];
            let this_run = trig
                .as_ref()
                .is_none_or(|t| st["run"]["trigger"] == json!(t));
            this_run && matches!(st["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
    };
    let f = tokio::time::timeout(Duration::from_secs(240), await_condition(api, name, done))
        .await
        .expect("flow finished")
        .unwrap()
        .unwrap();
    f.data["status"].clone()
}

/// Applies the example flow `file` (changed by `patch`) and waits for the run its run
/// annotation names (or its first run) to end; returns the flow's status.
pub async fn run_seed_flow(client: &Client, file: &str, patch: impl Fn(&mut Value)) -> Value {
    let text = std::fs::read_to_string(repo().join(file)).unwrap();
    let mut flow: Value = serde_yaml::from_str(&text).unwrap();
    patch(&mut flow);
    let name = flow["metadata"]["name"].as_str().unwrap().to_string();
    apply_text(client, &serde_json::to_string(&flow).unwrap()).await;
    let trigger = flow["metadata"]["annotations"]["ops.example.com/run"].as_str();
    wait_seed_flow(client, &name, trigger).await
}

/// Unix times of the `systemctl restart kubelet` calls recorded on `node`.
pub fn kubelet_restarts(node: &str) -> Vec<f64> {
    env()
        .node_calls(node)
        .iter()
        .filter(|l| l.ends_with(" systemctl restart kubelet"))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect()
}
