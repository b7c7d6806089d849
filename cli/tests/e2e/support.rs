//! What the verbs' tests share: the one testenv cluster, a flow namespace, an in-process
//! controller, running the plugin (to its end, or spawned to read as it goes) and a few reads.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{run_controller, Context};
use pseudoflow_test_support::{apply, create_flow, install_crd, wait_done, FlowNamespace};
use pseudoflow_testenv::{shared_with, Options, TestEnv};
use serde_json::{json, Value};

pub const IMAGE: &str = "pseudoflow/runtime:e2e";

pub fn env() -> &'static TestEnv {
    shared_with(|| {
        let mut o = Options::default();
        o.images
            .insert_runtime(IMAGE, pseudoflow_test_support::step_binary());
        o
    })
    .unwrap_or_else(|e| panic!("testenv: {e}"))
}

/// A namespace whose ServiceAccount `flow` may manage ConfigMaps and Secrets and list nodes.
pub async fn namespace(prefix: &str) -> (Client, String) {
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = FlowNamespace::new(prefix)
        .rules(json!([{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]}]))
        .cluster_rules(json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]))
        .create(env, &client)
        .await;
    (client, ns)
}

/// The in-process controller's context: the admin's client, the e2e runtime image.
pub fn context(client: &Client) -> Context {
    Context::new(client.clone(), IMAGE.into(), Arc::new(Metrics::default()))
}

/// Runs a controller with `ctx` for namespace `ns` until the handle is aborted.
pub fn spawn_controller(ctx: Context, ns: &str) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run_controller(Arc::new(ctx), Some(ns.to_string())))
}

/// An in-process controller for `ns` with the plain context.
pub fn start_controller(client: &Client, ns: &str) -> tokio::task::JoinHandle<()> {
    spawn_controller(context(client), ns)
}

/// A controller that acts as a flow's ServiceAccount by impersonation (a bound flow's steps, a
/// step run inside the controller): it needs a client configuration, the admin's kubeconfig.
pub async fn start_impersonating_controller(
    client: &Client,
    ns: &str,
) -> tokio::task::JoinHandle<()> {
    let kubeconfig = kube::config::Kubeconfig::read_from(env().kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    spawn_controller(context(client).with_config(config), ns)
}

/// What one run of the plugin gave.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `kubectl-pf --kubeconfig <kubeconfig> ARGS` off the runtime.
pub async fn pf_as(kubeconfig: PathBuf, args: &[&str]) -> Out {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let o = Command::new(env!("CARGO_BIN_EXE_kubectl-pf"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(&args)
            .output()
            .unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        }
    })
    .await
    .unwrap()
}

pub async fn pf(args: &[&str]) -> Out {
    pf_as(env().kubeconfig_path().to_path_buf(), args).await
}

/// A flow of two applies and a waitFor: one fused Job (step fusion), three status entries.
pub async fn run_fused_flow(client: &Client, ns: &str, name: &str) -> Value {
    create_flow(client, ns, name, json!({
        "serviceAccountName": "flow",
        "steps": [
            {"name": "first", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one", "namespace": ns}, "data": {"a": "1"}}},
            {"name": "second", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "two", "namespace": ns}, "data": {"b": "2"}}},
            {"name": "third", "type": "waitFor", "resource": {"kind": "ConfigMap", "name": "two", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 60}
        ]
    }))
    .await;
    let st = wait_done(client, ns, name, 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    st
}

pub async fn job_names(client: &Client, ns: &str) -> Vec<String> {
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect()
}

/// A kubeconfig for ServiceAccount `viewer` of `ns`, who may get and list flows there and
/// nothing else (no impersonation, no other kind).
pub async fn viewer_kubeconfig(client: &Client, ns: &str) -> PathBuf {
    apply(client, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer", "namespace": ns}})).await;
    apply(client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "viewer", "namespace": ns},
        "rules": [{"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["get", "list"]}]})).await;
    apply(client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "viewer", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": ns}]})).await;
    let req = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}});
    let tr: Value = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_subresource("token", "viewer", &PostParams::default(), &req)
        .await
        .unwrap();
    let token = tr["status"]["token"].as_str().unwrap();
    let mut kc: Value =
        serde_yaml::from_str(&std::fs::read_to_string(env().kubeconfig_path()).unwrap()).unwrap();
    for u in kc["users"].as_array_mut().unwrap() {
        u["user"] = json!({"token": token});
    }
    let path = env().dir().join(format!("{ns}-viewer.kubeconfig"));
    std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
    path
}

/// What `stdout` printed up to and including the first line `stop` accepts (read off the
/// runtime); fails the test if that line does not come within `secs`.
pub async fn lines_until(
    stdout: std::process::ChildStdout,
    secs: u64,
    stop: fn(&str) -> bool,
) -> String {
    let reading = tokio::task::spawn_blocking(move || {
        let mut seen = String::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if stop(&line) {
                break;
            }
        }
        seen
    });
    tokio::time::timeout(Duration::from_secs(secs), reading)
        .await
        .expect("the awaited line was not printed in time")
        .unwrap()
}

/// Spawns `kubectl-pf ARGS` with piped stdout.
pub fn spawn_pf(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_kubectl-pf"))
        .arg("--kubeconfig")
        .arg(env().kubeconfig_path())
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `kubectl-pf __complete ARGS...`, as kubectl's `kubectl_complete-pf` runs it.
pub fn complete(args: &[&str]) -> Vec<String> {
    let o = Command::new(env!("CARGO_BIN_EXE_kubectl-pf"))
        .arg("__complete")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect()
}
