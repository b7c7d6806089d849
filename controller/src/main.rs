//! `pseudoflow-controller`: watches PseudoFlows (all namespaces, or each `--namespace`), runs
//! them, and serves Prometheus metrics on `--metrics-addr`. Node steps (root on nodes) run only
//! in namespaces listed in `--node-step-namespaces` (repeatable or comma-separated) that are also
//! labelled `pod-security.kubernetes.io/enforce=privileged`; without the flag, nowhere. With `--leader-election` only the
//! replica holding the Lease works; losing it exits (the Deployment restarts the pod), and
//! SIGTERM releases it so a successor takes over at once.

use std::sync::Arc;

use pseudoflow_controller::leader::{self, LeaseConfig};
use pseudoflow_controller::metrics::{serve, Metrics};
use pseudoflow_controller::reconcile::pod_security::NodeStepNamespaces;
use pseudoflow_controller::{run_controllers, Context};
use tokio::signal::unix::{signal, SignalKind};

const USAGE: &str = "usage: pseudoflow-controller [--image IMAGE] [--namespace NS]... \
[--node-step-namespaces NS[,NS]]... [--metrics-addr ADDR] [--leader-election] \
[--leader-election-namespace NS]";

/// A name unique to this process: the pod name (or host name) plus the pid and start time.
fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "pseudoflow-controller".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}-{}-{nanos:08x}", std::process::id())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let mut image = pseudoflow_compiler::lower::LowerOptions::default().image;
    let mut namespaces = Vec::new();
    let mut node_step_namespaces = NodeStepNamespaces::default();
    let mut metrics_addr: std::net::SocketAddr = "127.0.0.1:8080".parse()?;
    let mut leader_election = false;
    let mut lease_namespace = std::env::var("POD_NAMESPACE").ok();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| anyhow::anyhow!("{flag} needs a value; {USAGE}"))
        };
        match flag.as_str() {
            "--image" => image = value()?,
            "--namespace" => namespaces.push(value()?),
            "--node-step-namespaces" => node_step_namespaces.add_flag_value(&value()?),
            "--metrics-addr" => metrics_addr = value()?.parse()?,
            "--leader-election" => leader_election = true,
            "--leader-election-namespace" => lease_namespace = Some(value()?),
            other => anyhow::bail!("unknown argument {other}; {USAGE}"),
        }
    }
    let client = kube::Client::try_default().await?;
    let metrics = Arc::new(Metrics::default());
    tokio::spawn(serve(metrics_addr, metrics.clone()));
    let allowed: Vec<&str> = node_step_namespaces.names().collect();
    tracing::info!("node steps allowed in namespaces {allowed:?} labelled enforce=privileged");
    let ctx = Context::new(client.clone(), image, metrics)
        .with_node_step_namespaces(node_step_namespaces);
    let ctx = Arc::new(ctx);
    let mut term = signal(SignalKind::terminate())?;
    if !leader_election {
        tokio::select! {
            _ = run_controllers(ctx, namespaces) => {}
            _ = term.recv() => {}
        }
        return Ok(());
    }
    let lease_namespace = lease_namespace.ok_or_else(|| {
        anyhow::anyhow!("--leader-election needs POD_NAMESPACE or --leader-election-namespace")
    })?;
    let cfg = LeaseConfig::new(&lease_namespace, &identity());
    tokio::select! {
        r = leader::acquire(&client, &cfg) => r?,
        _ = term.recv() => return Ok(()),
    }
    tokio::select! {
        _ = run_controllers(ctx, namespaces) => Ok(()),
        lost = leader::hold(&client, &cfg) => {
            tracing::error!("{lost}; exiting so a new replica can run");
            std::process::exit(1)
        }
        _ = term.recv() => {
            leader::release(&client, &cfg).await?;
            Ok(())
        }
    }
}
