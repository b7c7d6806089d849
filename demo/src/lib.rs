//! `make demo`: starts a local control plane with three simulated nodes, installs the CRD, runs
//! the controller, applies the seed's example flows exactly as written and shows their progress
//! until they finish; then leaves the cluster running (KUBECONFIG printed) until Ctrl-C.
//!
//! `make demo-real` (`--real N`, N ≥ 2): the same on a cluster whose nodes are all real
//! (testenv's real nodes: kubelet, containerd, runc, CNI, kube-proxy; `cp-0` labelled and tainted
//! control-plane, `node-1`...), with the controller installed by `helm install` of the chart as a
//! Deployment pod from the local image (`make images`), in-cluster config, leader election on.
//! Every step runs in a Job of the runtime image on a real node; the seed's NodeLocal DNS
//! DaemonSet runs the declared stand-in for its image (testenv/src/standins.rs), and so does the
//! bound Database's pod (`postgres:15.3`). Ctrl-C stops the nodes and the control plane and
//! removes what they made on the machine.
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
//! With real nodes the chart's webhooks are on and called as on any cluster: through their
//! Service, at the controller pod, over the pod network (testenv routes each node's pod range
//! from the machine, where its API server runs), the API server presenting its webhook client
//! certificate (`webhook.clientAuth.caBundle`); the approval key is the chart's controller's.
//!
//! `make demo ARGOCD=1` (`--argocd`): the same, but the seed flows are synced by a real Argo CD
//! from a local git repository (`gitops.rs`), and the closing text says how to commit a change
//! and watch it run.
//!
//! The library is the demo's setup, so that `demo/tests/readme.rs` starts the same stack as
//! `make demo` and runs the README's commands against it; `main.rs` only parses arguments and
//! prints the closing text.

use std::path::{Path, PathBuf};

use anyhow::Result;
use pseudoflow_testenv::{apply::apply_text, seed, TestEnv};

pub mod cluster;
pub mod gitops;
pub mod helm;
pub mod installed;
pub mod progress;
pub mod tour;

/// The runtime image the simulated nodes run as the locally built `pseudoflow-step`.
pub const IMAGE: &str = "pseudoflow/runtime:demo";

/// The namespace half of the node-step opt-in for kube-system, where the seed's node steps run.
const NODE_STEPS_NAMESPACE_LABEL: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-system\n  labels: {pod-security.kubernetes.io/enforce: privileged}\n";

/// The repository root, where the example flows are read from (as a user applies them).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `make demo`'s running stack, kept alive as long as this value (and the runtime whose tasks
/// serve the controller and its webhooks).
pub struct Demo {
    /// The local control plane; dropping it stops the cluster.
    pub env: TestEnv,
    /// Where the API server calls the admission webhooks.
    pub webhook_url: String,
    /// Whether every seed flow Succeeded.
    pub all_succeeded: bool,
    /// With `--argocd`: the Argo CD syncing the seed flows and its git repository.
    pub gitops: Option<gitops::GitOps>,
}

/// `make demo` up to its closing text: the cluster with simulated nodes running `step`, the
/// controller as installed (in this process), the seed flows run to the end, then the bound
/// `Database` flow and the approval waiting (`tour.rs`).
pub async fn start_installed(step: PathBuf) -> Result<Demo> {
    start_installed_with(step, false).await
}

/// [`start_installed`], with the seed flows synced by Argo CD from a local git repository when
/// `argocd` (`make demo ARGOCD=1`); fails at once, naming `make argocd`, if it is not built.
pub async fn start_installed_with(step: PathBuf, argocd: bool) -> Result<Demo> {
    if argocd {
        gitops::check_built()?;
    }
    let root = repo();
    let env = cluster::start_simulated(step).await?;
    let client = env.client().await?;
    seed::prepare(&env, &client, &root).await?;
    apply_text(&client, NODE_STEPS_NAMESPACE_LABEL, None).await?;
    let webhook_url = start_controller(&env, &client).await?;
    let (gitops, names) = if argocd {
        let (g, names) = gitops::start(&env, &client, &root).await?;
        (Some(g), names)
    } else {
        (None, seed::apply_flows(&client, &root).await?)
    };
    let all_succeeded = progress::watch_flows(&client, &names).await?;
    progress::show_worker_0(&env);
    println!();
    tour::start(&client, &root).await?;
    Ok(Demo {
        env,
        webhook_url,
        all_succeeded,
        gitops,
    })
}

/// `make demo-real`: a cluster of `n` real nodes, the chart installed by helm with its webhooks
/// on, the seed flows run to the end and what they did to `node-1` shown, then the bound
/// `Database` and the approval waiting (`tour.rs`), as `make demo`.
pub async fn start_real(n: usize) -> Result<Demo> {
    let root = repo();
    let env = cluster::start_real(n).await?;
    let client = env.client().await?;
    // The chart brings the CRD; the seed's preparation applies the same one again.
    helm::install(&env, &root).await?;
    seed::prepare(&env, &client, &root).await?;
    apply_text(&client, NODE_STEPS_NAMESPACE_LABEL, None).await?;
    helm::wait_controller_ready(&client).await?;
    // Flows are refused (failure policy Fail) until the API server reaches the webhook pod.
    let t0 = std::time::Instant::now();
    installed::wait_answering(&client).await?;
    println!(
        "admission webhooks called through {} at the controller pod {:.1}s later (a dry run of a typo refused with its path)\n",
        helm::WEBHOOK_SERVICE,
        t0.elapsed().as_secs_f64()
    );
    let names = seed::apply_flows(&client, &root).await?;
    let all_succeeded = progress::watch_flows(&client, &names).await?;
    progress::show_real_node(&env, "node-1");
    println!();
    tour::start(&client, &root).await?;
    Ok(Demo {
        env,
        webhook_url: helm::WEBHOOK_SERVICE.to_string(),
        all_succeeded,
        gitops: None,
    })
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
