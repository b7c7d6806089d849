//! Benchmark 2: the seed's NodeLocal DNS flow (examples/nodelocaldns.yaml, as written) on the
//! cluster's nodes, simulated or real, prepared like `make demo` prepares it (seed CRDs,
//! artifacts, kubeadm-like node files, kube-system opted in to node steps). One run: the flow
//! changes the nodes.

use std::path::Path;
use std::time::Instant;

use kube::Client;
use pseudoflow_testenv::apply::apply_text;
use pseudoflow_testenv::{seed, TestEnv};

use crate::common::{self, JobCounter, Row};
use crate::process;

const NS: &str = "kube-system";
const FLOW: &str = "setup-nodelocaldns";

/// The section on `env`'s nodes (its real ones if it has any), executor pods from `image`;
/// `title` names the row's nodes.
pub async fn run(
    env: &TestEnv,
    client: &Client,
    repo: &Path,
    image: &str,
    title: &str,
) -> Vec<Row> {
    seed::prepare(env, client, repo).await.unwrap();
    apply_text(
        client,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-system\n  labels: {pod-security.kubernetes.io/enforce: privileged}\n",
        None,
    )
    .await
    .unwrap();
    let ctl = process::in_process(client, image, NS, true);
    let counter = JobCounter::start(client, NS).await;
    let text = std::fs::read_to_string(repo.join("examples/nodelocaldns.yaml")).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let t = Instant::now();
    apply_text(client, &text, Some("default")).await.unwrap();
    let status = common::wait_succeeded(client, NS, FLOW, 600).await;
    let took = t.elapsed();
    ctl.abort();
    let roots: Vec<(String, std::path::PathBuf)> = if env.real_nodes().is_empty() {
        env.nodes()
            .iter()
            .map(|n| (n.clone(), env.node_root(n)))
            .collect()
    } else {
        env.real_nodes()
            .iter()
            .map(|n| (n.name.clone(), n.root()))
            .collect()
    };
    for (node, root) in &roots {
        let flags =
            std::fs::read_to_string(root.join("var/lib/kubelet/kubeadm-flags.env")).unwrap();
        assert!(
            flags.contains("--resolv-conf=/etc/kubelet-resolv.conf"),
            "{node}: {flags}"
        );
    }
    let steps = status["steps"].as_array().map_or(0, Vec::len);
    vec![Row {
        workload: format!("2. seed NodeLocal DNS flow on {} {title}", roots.len()),
        driver: "PseudoFlow (examples/nodelocaldns.yaml as written)".into(),
        wall: common::secs(took),
        jobs: counter.of_flow(FLOW).to_string(),
        ratio: "-".into(),
        notes: format!(
            "1 run; {steps} entries in status.steps; every node's kubeadm-flags.env checked"
        ),
    }]
}
