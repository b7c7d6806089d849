//! `pseudoflow-controller`: watches PseudoFlows (all namespaces, or `--namespace`), runs them, and
//! serves Prometheus metrics on `--metrics-addr`.

use std::sync::Arc;

use pseudoflow_controller::metrics::{serve, Metrics};
use pseudoflow_controller::{run_controller, Context};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let mut image = pseudoflow_compiler::lower::LowerOptions::default().image;
    let mut namespace = None;
    let mut metrics_addr: std::net::SocketAddr = "127.0.0.1:8080".parse()?;
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
                .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--image" => image = value()?,
            "--namespace" => namespace = Some(value()?),
            "--metrics-addr" => metrics_addr = value()?.parse()?,
            "--leader-election" => {}
            other => anyhow::bail!("unknown argument {other}; usage: pseudoflow-controller [--image IMAGE] [--namespace NS] [--metrics-addr ADDR]"),
        }
    }
    let client = kube::Client::try_default().await?;
    let metrics = Arc::new(Metrics::default());
    tokio::spawn(serve(metrics_addr, metrics.clone()));
    let ctx = Arc::new(Context::new(client, image, metrics));
    run_controller(ctx, namespace).await;
    Ok(())
}
