//! Attacks on node optin (see main.rs): a user who may only create PseudoFlows in a namespace
//! tries to get root on a node with a `configFile` step. Node steps need the namespace labelled
//! `pod-security.kubernetes.io/enforce=privileged` AND listed in the controller's
//! `--node-step-namespaces`; lacking either, the step fails at once naming its path, the
//! namespace and both requirements, and no node-pinned Job or privileged pod exists.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::{
    create_flow, env, label_privileged, prepare, start_controller_allowing,
    start_node_controller, wait_done,
};

/// A namespace whose flow ServiceAccount `flow` may list nodes (what a node fan-out needs).
async fn namespace(prefix: &str) -> (Client, String) {
    let node_reader =
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]);
    prepare(prefix, json!([]), node_reader).await
}

/// The file the flow writes, relative to a node's root.
fn file(ns: &str) -> String {
    format!("etc/pseudoflow-test/optin-{ns}.conf")
}

/// Creates flow `root` writing [`file`] on the worker nodes and waits for its end.
async fn write_on_workers(client: &Client, ns: &str) -> Value {
    create_flow(
        client,
        ns,
        "root",
        json!({"serviceAccountName": "flow", "steps": [{
            "type": "configFile", "nodeSelector": "!node-role.kubernetes.io/control-plane",
            "path": format!("/{}", file(ns)), "content": "opted in\n",
        }]}),
    )
    .await;
    wait_done(client, ns, "root", 90).await
}

/// The nodes whose root holds [`file`].
fn nodes_with_file(ns: &str) -> Vec<&'static str> {
    ["cp-0", "worker-0", "worker-1"]
        .into_iter()
        .filter(|n| env().node_root(n).join(file(ns)).exists())
        .collect()
}

/// Asserts the flow failed at its node step with the opt-in message and left nothing on nodes.
async fn assert_refused(client: &Client, ns: &str, status: &Value) {
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap_or_default();
    for part in [
        "spec.steps[0]",
        &format!("namespace {ns:?}"),
        "pod-security.kubernetes.io/enforce=privileged",
        "--node-step-namespaces",
        "nodeSteps.namespaces",
    ] {
        assert!(message.contains(part), "message lacks {part:?}: {message}");
    }
    let pinned: Vec<String> = Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|j| j.spec?.template.spec?.node_name)
        .collect();
    assert!(pinned.is_empty(), "node-pinned Jobs were created: {pinned:?}");
    let privileged: Vec<String> = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.spec.as_ref().is_some_and(|s| {
                s.host_pid == Some(true)
                    || s.containers.iter().any(|c| {
                        c.security_context
                            .as_ref()
                            .and_then(|sc| sc.privileged)
                            .unwrap_or(false)
                    })
            })
        })
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(privileged.is_empty(), "privileged pods: {privileged:?}");
    assert_eq!(nodes_with_file(ns), Vec::<&str>::new(), "a node was changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlabelled_and_not_allowed_namespace_gets_no_root_on_nodes() {
    let (client, ns) = namespace("optin-none").await;
    let ctl = start_controller_allowing(&client, &ns, &["kube-system"]);
    let status = write_on_workers(&client, &ns).await;
    assert_refused(&client, &ns, &status).await;
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("it has no pod-security.kubernetes.io/enforce label")
            && message.contains("it is not in the controller's --node-step-namespaces"),
        "names both missing halves: {message}"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileged_label_alone_is_not_an_opt_in() {
    let (client, ns) = namespace("optin-label").await;
    label_privileged(&client, &ns).await;
    let ctl = start_controller_allowing(&client, &ns, &["kube-system"]);
    let status = write_on_workers(&client, &ns).await;
    assert_refused(&client, &ns, &status).await;
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("it is not in the controller's --node-step-namespaces")
            && !message.contains("it has no"),
        "names the allow-list only: {message}"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_list_alone_is_not_an_opt_in() {
    let (client, ns) = namespace("optin-list").await;
    let ctl = start_controller_allowing(&client, &ns, &[&ns]);
    let status = write_on_workers(&client, &ns).await;
    assert_refused(&client, &ns, &status).await;
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("it has no pod-security.kubernetes.io/enforce label")
            && !message.contains("it is not in"),
        "names the label only: {message}"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_and_allow_list_together_run_the_node_step() {
    let (client, ns) = namespace("optin-both").await;
    let ctl = start_node_controller(&client, &ns).await;
    let status = write_on_workers(&client, &ns).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(nodes_with_file(&ns), ["worker-0", "worker-1"]);
    ctl.abort();
}
