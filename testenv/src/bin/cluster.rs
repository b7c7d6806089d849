//! `make cluster`: a local control plane with simulated nodes for a person to use. Prints the
//! KUBECONFIG; Ctrl-C stops everything. `--real N` adds N real nodes (kubelet + containerd in
//! their own namespaces; `make images` first), `--nodes 0 --real N` makes every node real.

use pseudoflow_testenv::{Options, TestEnv};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into());
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let mut nodes = 3;
    let mut real = 0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--nodes" => nodes = args.next().and_then(|n| n.parse().ok()).unwrap_or(3),
            "--real" => real = args.next().and_then(|n| n.parse().ok()).unwrap_or(1),
            other => {
                anyhow::bail!(
                    "unknown argument {other}; usage: pseudoflow-cluster [--nodes N] [--real N]"
                )
            }
        }
    }
    let opts = if real > 0 {
        Options::with_real_nodes(nodes, real)
    } else {
        Options::with_nodes(nodes)
    };
    let env = TestEnv::start(opts).await?;
    for n in env.real_nodes() {
        println!(
            "real node {} at {} Ready {:.1}s after its start; root {}",
            n.name,
            n.ip,
            n.startup.as_secs_f64(),
            n.root().display()
        );
    }
    println!(
        "cluster ready in {:.1}s with {} nodes: {}",
        env.startup.as_secs_f64(),
        env.nodes().len(),
        env.nodes().join(", ")
    );
    println!("export KUBECONFIG={}", env.kubeconfig_path().display());
    println!(
        "kubectl --kubeconfig {} get nodes",
        env.kubeconfig_path().display()
    );
    println!(
        "logs: {}/logs; node filesystems: {}/nodes/<node>/root. Ctrl-C to stop.",
        env.dir().display(),
        env.dir().display()
    );
    tokio::signal::ctrl_c().await?;
    println!("stopping");
    // Dropped here, not left to the exit: real nodes are stopped and their bridge removed.
    drop(env);
    Ok(())
}
