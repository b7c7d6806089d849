//! `make demo`: starts a local control plane with three simulated nodes, installs the CRD, runs
//! the controller, applies the seed's example flows exactly as written and shows their progress
//! until they finish; then leaves the cluster running (KUBECONFIG printed) until Ctrl-C.
//!
//! `make demo-real` (`--real N`, N ≥ 2): the same on a cluster whose nodes are all real
//! (testenv's real nodes: kubelet, containerd, runc, CNI, kube-proxy; `cp-0` labelled and tainted
//! control-plane, `node-1`...), with the controller installed by `helm install` of the chart as a
//! Deployment pod from the local image (`make images`), in-cluster config, leader election on.
//! Every step runs in a Job of the runtime image on a real node; the seed's NodeLocal DNS
//! DaemonSet runs the declared stand-in for its image (testenv/src/standins.rs). Ctrl-C stops
//! the nodes and the control plane and removes what they made on the machine.
//!
//! `make demo` runs the controller as the chart installs it (`installed.rs`): its validating and
//! mutating webhooks registered with the API server, the approval key and impersonation for
//! bound flows. After the seed flows it applies a flow bound to seed 001's `Database` kind
//! serving one `Database`, and a flow waiting at an approval step (`tour.rs`), and prints the
//! commands to look at them.
//!
//! Demo-only shortcuts, said out loud: the flows' `default` ServiceAccounts get cluster-admin
//! (the seed flows name no ServiceAccount), and third-party CRDs are open stand-ins. The node
//! steps of the seed flows run in kube-system, which the demo opts in as an operator would: the
//! namespace labelled `pod-security.kubernetes.io/enforce=privileged` and allow-listed in the
//! controller (`--node-step-namespaces kube-system`; the chart's default `nodeSteps.namespaces`).
//! With real nodes the chart's webhook is off: testenv's API server runs on the machine, outside
//! the pod network, so it cannot call a webhook Service's pods.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use kube::api::{Api, DynamicObject};
use pseudoflow_controller::reconcile::flow_resource;
use pseudoflow_testenv::{apply::apply_text, seed, Options, TestEnv};

mod installed;
mod tour;

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
    let real = real_nodes_arg()?;
    let root = repo();
    let t0 = Instant::now();
    let env = match real {
        None => start_cluster().await?,
        Some(n) => start_real_cluster(n).await?,
    };
    let client = env.client().await?;
    if real.is_some() {
        // The chart brings the CRD; the seed's preparation applies the same one again.
        helm_install(&env, &root).await?;
    }
    seed::prepare(&env, &client, &root).await?;
    apply_text(&client, NODE_STEPS_NAMESPACE_LABEL, None).await?;
    let webhook_url = match real {
        None => Some(start_controller(&env, &client).await?),
        Some(_) => {
            wait_controller_ready(&client).await?;
            None
        }
    };
    let names = seed::apply_flows(&client, &root).await?;
    let all_succeeded = watch_flows(&client, &names).await?;
    match real {
        None => show_worker_0(&env),
        Some(_) => show_real_node(&env, "node-1"),
    }
    if let Some(url) = webhook_url {
        println!();
        tour::start(&client, &root).await?;
        let tools = [
            pseudoflow_testenv::binaries::bin_dir(),
            std::env::current_exe()?.parent().unwrap().to_path_buf(),
        ];
        println!(
            "{}",
            tour::closing_text(env.kubeconfig_path(), &tools, &url)
        );
    } else {
        println!(
            "\n{} in {:.1}s from the start (cluster, helm install, flows).",
            if all_succeeded {
                "all flows Succeeded"
            } else {
                "flows finished, not all Succeeded"
            },
            t0.elapsed().as_secs_f64()
        );
        println!("\nThe cluster keeps running. Try:\n  export KUBECONFIG={}\n  kubectl get pf -A\n  kubectl describe pf -n kube-system setup-nodelocaldns\nCtrl-C stops everything.", env.kubeconfig_path().display());
    }
    tokio::signal::ctrl_c().await?;
    println!("stopping");
    // Dropped here, not left to the exit: real nodes are stopped and their bridge removed.
    drop(env);
    Ok(())
}

/// `--real N` (N ≥ 2), or nothing.
fn real_nodes_arg() -> Result<Option<usize>> {
    let mut args = std::env::args().skip(1);
    let mut real = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--real" => {
                let n: usize = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| anyhow::anyhow!("--real needs a number of nodes"))?;
                anyhow::ensure!(
                    n >= 2,
                    "--real needs at least 2 nodes (a control plane and a worker)"
                );
                real = Some(n);
            }
            other => anyhow::bail!("unknown argument {other}; usage: pseudoflow-demo [--real N]"),
        }
    }
    Ok(real)
}

/// A local control plane whose `n` nodes are all real: `cp-0` (control plane) and `node-1`...
async fn start_real_cluster(n: usize) -> Result<TestEnv> {
    println!("starting a local control plane (etcd, kube-apiserver, controller-manager, scheduler v1.34.4) with {n} real nodes (kubelet, containerd, runc, CNI, kube-proxy)...");
    let env = TestEnv::start(Options::with_real_nodes(0, n)).await?;
    for node in env.real_nodes() {
        println!(
            "real node {} at {} Ready {:.1}s after its start",
            node.name,
            node.ip,
            node.startup.as_secs_f64()
        );
    }
    println!("cluster ready in {:.1}s", env.startup.as_secs_f64());
    Ok(env)
}

/// The namespace the chart is installed in.
const CONTROLLER_NAMESPACE: &str = "pseudoflow-system";

/// `helm install` of the chart with the local images (`make images`), as a user would.
async fn helm_install(env: &TestEnv, root: &Path) -> Result<()> {
    let helm = helm_binary()?;
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
        "webhook.enabled=false",
    ] {
        args.extend(["--set".to_string(), kv.to_string()]);
    }
    println!("helm install pseudoflow charts/pseudoflow-operator -n {CONTROLLER_NAMESPACE} (local images, leader election on, webhook off)");
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
fn helm_binary() -> Result<PathBuf> {
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
async fn wait_controller_ready(client: &kube::Client) -> Result<()> {
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

/// The controller, in this process, as installed (`installed.rs`), its metrics served; node
/// steps allowed in kube-system (both halves of the opt-in), where the seed flows run them.
/// Returns where its webhooks are served.
async fn start_controller(env: &TestEnv, client: &kube::Client) -> Result<String> {
    let started = installed::start(env, client, IMAGE).await?;
    println!(
        "controller running: admission webhooks at {} (registered with the API server), approval key in {}, metrics on http://127.0.0.1:8080/metrics\n",
        started.webhook_url,
        installed::NAMESPACE
    );
    Ok(started.webhook_url)
}

/// Prints a table of the flows (`names`: namespace, name) whenever it changes, until every
/// flow has finished (or ten minutes passed); returns whether all Succeeded.
async fn watch_flows(client: &kube::Client, names: &[(String, String)]) -> Result<bool> {
    let flows_of =
        |ns: &str| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &flow_resource());
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let mut table = format!(
            "{:<22} {:<12} {:<10} {:<9} {}\n",
            "FLOW", "NAMESPACE", "PHASE", "PROGRESS", "STEP / MESSAGE"
        );
        let (mut finished, mut succeeded) = (0, 0);
        for (ns, name) in names {
            let f = flows_of(ns).get(name).await?;
            let st = &f.data["status"];
            let phase = st["phase"].as_str().unwrap_or("Pending");
            if phase == "Succeeded" || phase == "Failed" {
                finished += 1;
            }
            if phase == "Succeeded" {
                succeeded += 1;
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
            return Ok(succeeded == names.len());
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

/// What the flows did to a real node: its files (in the node's own root) and its `systemctl`
/// stand-in's log (each `restart kubelet` started a new kubelet in the node).
fn show_real_node(env: &TestEnv, node: &str) {
    let Some(real) = env.real_node(node) else {
        return;
    };
    println!(
        "node files after the flows ({node}, a real node; its root is {}):",
        real.root().display()
    );
    for f in [
        "etc/kubelet-resolv.conf",
        "var/lib/kubelet/kubeadm-flags.env",
    ] {
        println!(
            "--- /{f}\n{}",
            std::fs::read_to_string(real.root().join(f))
                .unwrap_or_else(|_| "(missing)".into())
                .trim_end()
        );
    }
    println!(
        "systemctl calls in {node}:\n  {}",
        real.exec("cat /var/log/systemctl.log")
            .unwrap_or_default()
            .trim_end()
            .replace('\n', "\n  ")
    );
}
