//! `make demo-real`'s controller: the chart installed with `helm install`, as a user would.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use kube::api::Api;
use pseudoflow_testenv::TestEnv;

/// The namespace the chart is installed in.
pub const CONTROLLER_NAMESPACE: &str = "pseudoflow-system";

/// The webhook Service the chart makes for release `pseudoflow`, as the API server calls it.
pub const WEBHOOK_SERVICE: &str = "https://pseudoflow-webhook.pseudoflow-system.svc:443";

/// `helm install` of the chart with the local images (`make images`), as a user would, its
/// webhooks on: the API server calls them through their Service at the controller pod, over the
/// pod network, and presents its webhook client certificate, whose CA is
/// `webhook.clientAuth.caBundle` (docs/operations.md, "The API server authenticates to the
/// webhook"), so approvals are stamped.
pub async fn install(env: &TestEnv, root: &Path) -> Result<()> {
    let helm = binary()?;
    let chart = root.join("charts/pseudoflow-operator");
    let mut args: Vec<String> = ["install", "pseudoflow"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(chart.display().to_string());
    args.extend(
        ["--namespace", CONTROLLER_NAMESPACE, "--create-namespace"]
            .iter()
            .map(|s| s.to_string()),
    );
    for kv in [
        "image.controller.repository=docker.io/pseudoflow/controller",
        "image.controller.tag=local",
        "image.controller.pullPolicy=Never",
        "image.runtime.repository=docker.io/pseudoflow/runtime",
        "image.runtime.tag=local",
    ] {
        args.extend(["--set".to_string(), kv.to_string()]);
    }
    args.extend([
        "--set-file".to_string(),
        format!(
            "webhook.clientAuth.caBundle={}",
            env.webhook_client_ca().display()
        ),
    ]);
    println!("helm install pseudoflow charts/pseudoflow-operator -n {CONTROLLER_NAMESPACE} (local images, leader election on, webhooks on with the API server's client CA)");
    let kubeconfig = env.kubeconfig_path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(helm)
            .env("KUBECONFIG", kubeconfig)
            .args(&args)
            .output()
    })
    .await??;
    anyhow::ensure!(
        out.status.success(),
        "helm install failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// helm as `charts/install-tools.sh` builds it.
fn binary() -> Result<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache"));
    let helm = cache.join("pseudoflow/tools/helm");
    anyhow::ensure!(
        helm.is_file(),
        "{} not found: run `bash charts/install-tools.sh` (`make demo-real` does)",
        helm.display()
    );
    Ok(helm)
}

/// Waits until the chart's controller Deployment is ready (its pod holds the leader Lease).
pub async fn wait_controller_ready(client: &kube::Client) -> Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    let api: Api<Deployment> = Api::namespaced(client.clone(), CONTROLLER_NAMESPACE);
    let t0 = Instant::now();
    loop {
        let ready = api
            .get_opt("pseudoflow")
            .await?
            .and_then(|d| d.status)
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        if ready >= 1 {
            println!(
                "controller Deployment ready {:.1}s after helm install\n",
                t0.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(180),
            "the controller Deployment is not ready after 180 s: kubectl -n {CONTROLLER_NAMESPACE} describe pods"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
