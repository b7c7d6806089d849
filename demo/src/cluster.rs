//! The demo's local control plane: three simulated nodes, or all real ones.

use std::path::PathBuf;

use anyhow::Result;
use pseudoflow_testenv::{Options, TestEnv};

use crate::IMAGE;

/// A local control plane with three simulated nodes, whose runtime image is `step` (the
/// `pseudoflow-step` binary).
pub async fn start_simulated(step: PathBuf) -> Result<TestEnv> {
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

/// A local control plane whose `n` nodes are all real: `cp-0` (control plane) and `node-1`...
pub async fn start_real(n: usize) -> Result<TestEnv> {
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
