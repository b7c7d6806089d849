//! `make demo` and `make demo-real`: the setup is the library (`lib.rs`, which says what each
//! starts); this binary parses the arguments, prints the closing text and holds the cluster
//! until Ctrl-C.

use std::time::Instant;

use anyhow::Result;
use pseudoflow_demo::{gitops, start_installed_with, start_real, tour};

#[tokio::main]
async fn main() -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "warn,kube_client::client::builder=off,kube_runtime=error".into());
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let (real, argocd) = args()?;
    let t0 = Instant::now();
    let here = std::env::current_exe()?.parent().unwrap().to_path_buf();
    let demo = match real {
        None => start_installed_with(here.join("pseudoflow-step"), argocd).await?,
        Some(n) => {
            let demo = start_real(n).await?;
            println!(
                "\nready {:.1}s after the start (cluster, helm install, seed flows, the Database, the approval); {}.",
                t0.elapsed().as_secs_f64(),
                if demo.all_succeeded {
                    "all seed flows Succeeded"
                } else {
                    "seed flows finished, not all Succeeded"
                }
            );
            demo
        }
    };
    let tools = [pseudoflow_testenv::binaries::bin_dir(), here];
    println!(
        "{}",
        tour::closing_text(demo.env.kubeconfig_path(), &tools, &demo.webhook_url)
    );
    if let Some(g) = &demo.gitops {
        println!("{}", gitops::closing_text(&g.repo));
    }
    let (env, gitops) = (demo.env, demo.gitops);
    tokio::signal::ctrl_c().await?;
    println!("stopping");
    // Dropped here, not left to the exit: Argo CD first, then the cluster it watches (real
    // nodes are stopped and their bridge removed).
    drop(gitops);
    drop(env);
    Ok(())
}

/// `--real N` (N ≥ 2) and `--argocd`, each optional; not both.
fn args() -> Result<(Option<usize>, bool)> {
    let mut args = std::env::args().skip(1);
    let mut real = None;
    let mut argocd = false;
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
            "--argocd" => argocd = true,
            other => anyhow::bail!(
                "unknown argument {other}; usage: pseudoflow-demo [--real N | --argocd]"
            ),
        }
    }
    anyhow::ensure!(
        !(argocd && real.is_some()),
        "--argocd runs on simulated nodes only: leave out --real"
    );
    Ok((real, argocd))
}
