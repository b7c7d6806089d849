//! `make demo`: starts a local control plane with three simulated nodes, installs the CRD, runs
//! the controller, applies the seed's example flows exactly as written and shows their progress
//! until they finish; then leaves the cluster running (KUBECONFIG printed) until Ctrl-C.
//!
//! Demo-only shortcuts, said out loud: the flows' `default` ServiceAccounts get cluster-admin
//! (the seed flows name no ServiceAccount), and third-party CRDs are open stand-ins. The node
//! steps of the seed flows run in kube-system, which the demo opts in as an operator would: the
//! namespace labelled `pod-security.kubernetes.io/enforce=privileged` and allow-listed in the
//! controller (`--node-step-namespaces kube-system`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use kube::api::{Api, DynamicObject};
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::reconcile::flow_resource;
use pseudoflow_controller::{run_controller, Context};
use pseudoflow_testenv::{apply::apply_text, seed, Options, TestEnv};

const IMAGE: &str = "pseudoflow/runtime:demo";

/// The namespace half of the node-step opt-in for kube-system, where the seed's node steps run.
const NODE_STEPS_NAMESPACE_LABEL: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-system\n  labels: {pod-security.kubernetes.io/enforce: privileged}\n";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[tokio::main]
async fn main() -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "warn,kube_client::client::builder=off,kube_runtime=error".into());
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let env = start_cluster().await?;
    let client = env.client().await?;
    let root = repo();
    seed::prepare(&env, &client, &root).await?;
    start_controller(&client).await?;
    let names = seed::apply_flows(&client, &root).await?;
    watch_flows(&client, &names).await?;
    show_worker_0(&env);
    println!("\nThe cluster keeps running. Try:\n  export KUBECONFIG={}\n  kubectl get pf -A\n  kubectl describe pf -n kube-system setup-nodelocaldns\nCtrl-C stops everything.", env.kubeconfig_path().display());
    tokio::signal::ctrl_c().await?;
    Ok(())
}

/// A local control plane with three simulated nodes, whose runtime image is the
/// `pseudoflow-step` built beside this binary.
async fn start_cluster() -> Result<TestEnv> {
    let step = std::env::current_exe()?
        .parent()
        .unwrap()
        .join("pseudoflow-step");
    anyhow::ensure!(
        step.is_file(),
        "{} missing: `make demo` builds it",
        step.display()
    );
    let mut opts = Options::default();
    opts.images.insert_runtime(IMAGE, step);
    println!("starting a local control plane (etcd, kube-apiserver, controller-manager, scheduler v1.34.4) with 3 simulated nodes...");
    let env = TestEnv::start(opts).await?;
    println!("cluster ready in {:.1}s", env.startup.as_secs_f64());
    Ok(env)
}

/// The controller, in this process, with its metrics served; node steps allowed in
/// kube-system (both halves of the opt-in), where the seed flows run them.
async fn start_controller(client: &kube::Client) -> Result<()> {
    let metrics = Arc::new(Metrics::default());
    tokio::spawn(pseudoflow_controller::metrics::serve(
        "127.0.0.1:8080".parse()?,
        metrics.clone(),
    ));
    apply_text(client, NODE_STEPS_NAMESPACE_LABEL, None).await?;
    let ctx = Context::new(client.clone(), IMAGE.into(), metrics)
        .with_node_step_namespaces(["kube-system"].into_iter().collect());
    tokio::spawn(run_controller(Arc::new(ctx), None));
    println!("controller running (metrics on http://127.0.0.1:8080/metrics)\n");
    Ok(())
}

/// Prints a table of the flows (`names`: namespace, name) whenever it changes, until every
/// flow has finished (or ten minutes passed).
async fn watch_flows(client: &kube::Client, names: &[(String, String)]) -> Result<()> {
    let flows_of =
        |ns: &str| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &flow_resource());
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let mut table = format!(
            "{:<22} {:<12} {:<10} {:<9} {}\n",
            "FLOW", "NAMESPACE", "PHASE", "PROGRESS", "STEP / MESSAGE"
        );
        let mut finished = 0;
        for (ns, name) in names {
            let f = flows_of(ns).get(name).await?;
            let st = &f.data["status"];
            let phase = st["phase"].as_str().unwrap_or("Pending");
            if phase == "Succeeded" || phase == "Failed" {
                finished += 1;
            }
            let detail = if phase == "Running" {
                st["currentStep"].as_str().unwrap_or("")
            } else {
                st["message"].as_str().unwrap_or("")
            };
            table.push_str(&format!(
                "{:<22} {:<12} {:<10} {:<9} {}\n",
                name,
                ns,
                phase,
                st["progress"].as_str().unwrap_or("-"),
                detail.chars().take(90).collect::<String>()
            ));
        }
        if table != last {
            println!("[{:>5.1}s]\n{table}", started.elapsed().as_secs_f64());
            last = table;
        }
        if finished == names.len() || started.elapsed() > Duration::from_secs(600) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the flows did to worker-0: its files, and the host commands they ran there.
fn show_worker_0(env: &TestEnv) {
    println!("node files after the flows (worker-0):");
    for f in [
        "etc/kubelet-resolv.conf",
        "var/lib/kubelet/kubeadm-flags.env",
        "etc/kubernetes/kubelet.conf",
    ] {
        println!(
            "--- /{f}\n{}",
            std::fs::read_to_string(env.node_root("worker-0").join(f))
                .unwrap_or_else(|_| "(missing)".into())
                .trim_end()
        );
    }
    println!(
        "recorded host commands on worker-0:\n  {}",
        env.node_calls("worker-0").join("\n  ")
    );
}
