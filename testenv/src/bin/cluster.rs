//! `make cluster`: a local control plane with simulated nodes for a person to use. Prints the
//! KUBECONFIG; Ctrl-C stops everything.

use pseudoflow_testenv::{Options, TestEnv};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into());
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let mut nodes = 3;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--nodes" => nodes = args.next().and_then(|n| n.parse().ok()).unwrap_or(3),
            other => {
                anyhow::bail!("unknown argument {other}; usage: pseudoflow-cluster [--nodes N]")
            }
        }
    }
    let env = TestEnv::start(Options::with_nodes(nodes)).await?;
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
    Ok(())
}
