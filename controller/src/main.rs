//! `pseudoflow-controller`: watches PseudoFlows (all namespaces, or each `--namespace`), runs
//! them, and serves Prometheus metrics and the `/healthz` and `/readyz` probes on
//! `--metrics-addr`, and with `--webhook-addr` the validating admission webhook over TLS. Node steps (root on nodes) run only
//! in namespaces listed in `--node-step-namespaces` (repeatable or comma-separated) that are also
//! labelled `pod-security.kubernetes.io/enforce=privileged`; without the flag, nowhere. With `--leader-election` only the
//! replica holding the Lease works; losing it exits (the Deployment restarts the pod), and
//! SIGTERM releases it so a successor takes over at once. `--successful-runs-history-limit` and
//! `--failed-runs-history-limit` (default 3 and 1) say how many finished runs keep their objects
//! when a flow's `spec.options` does not. `--executor-defaults` (JSON, the chart's `executor`
//! values) gives every flow's executor pods settings under the flow's `spec.options.executor`.

use std::sync::Arc;

use pseudoflow_controller::leader::{self, LeaseConfig};
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::reconcile::history::HistoryLimits;
use pseudoflow_controller::reconcile::pod_security::NodeStepNamespaces;
use pseudoflow_controller::{approval, http, webhook};
use pseudoflow_controller::{run_controllers, Context};
use pseudoflow_crd::executor::ExecutorOptions;
use tokio::signal::unix::{signal, SignalKind};

const USAGE: &str = "usage: pseudoflow-controller [--image IMAGE] [--namespace NS]... \
[--node-step-namespaces NS[,NS]]... [--successful-runs-history-limit N] \
[--failed-runs-history-limit N] [--executor-defaults JSON] [--metrics-addr ADDR] [--leader-election] \
[--leader-election-namespace NS] [--webhook-addr ADDR [--webhook-cert-dir DIR | \
--webhook-cert-names NAME[,NAME]... [--webhook-cert-secret NAME] \
[--webhook-configuration NAME]] [--webhook-client-ca FILE [--webhook-client-names NAME[,NAME]...]] \
[--webhook-unauthenticated-approvals]]";

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

/// The command line, parsed once, so that `main` reads as the steps of a start.
struct Args {
    image: String,
    namespaces: Vec<String>,
    node_step_namespaces: NodeStepNamespaces,
    history: HistoryLimits,
    executor: ExecutorOptions,
    metrics_addr: std::net::SocketAddr,
    leader_election: bool,
    lease_namespace: Option<String>,
    webhook_addr: Option<std::net::SocketAddr>,
    cert_dir: Option<std::path::PathBuf>,
    cert_names: Vec<String>,
    cert_secret: String,
    webhook_configuration: Option<String>,
    client_ca: Option<std::path::PathBuf>,
    client_names: Vec<String>,
    unauthenticated_approvals: bool,
}

impl Args {
    fn parse() -> anyhow::Result<Args> {
        let mut out = Args {
            image: pseudoflow_compiler::lower::LowerOptions::default().image,
            namespaces: Vec::new(),
            node_step_namespaces: NodeStepNamespaces::default(),
            history: HistoryLimits::default(),
            executor: ExecutorOptions::default(),
            metrics_addr: "127.0.0.1:8080".parse()?,
            leader_election: false,
            lease_namespace: std::env::var("POD_NAMESPACE").ok(),
            webhook_addr: None,
            cert_dir: None,
            cert_names: Vec::new(),
            cert_secret: "pseudoflow-webhook-tls".to_string(),
            webhook_configuration: None,
            client_ca: None,
            client_names: Vec::new(),
            unauthenticated_approvals: false,
        };
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
                "--image" => out.image = value()?,
                "--namespace" => out.namespaces.push(value()?),
                "--node-step-namespaces" => out.node_step_namespaces.add_flag_value(&value()?),
                "--successful-runs-history-limit" => out.history.succeeded = value()?.parse()?,
                "--failed-runs-history-limit" => out.history.failed = value()?.parse()?,
                "--executor-defaults" => out.executor = executor_defaults(&value()?)?,
                "--metrics-addr" => out.metrics_addr = value()?.parse()?,
                "--leader-election" => out.leader_election = true,
                "--leader-election-namespace" => out.lease_namespace = Some(value()?),
                "--webhook-addr" => out.webhook_addr = Some(value()?.parse()?),
                "--webhook-cert-dir" => out.cert_dir = Some(value()?.into()),
                "--webhook-cert-names" => out.cert_names.extend(
                    value()?
                        .split(',')
                        .filter(|n| !n.is_empty())
                        .map(str::to_string),
                ),
                "--webhook-cert-secret" => out.cert_secret = value()?,
                "--webhook-configuration" => out.webhook_configuration = Some(value()?),
                "--webhook-client-ca" => out.client_ca = Some(value()?.into()),
                "--webhook-client-names" => out.client_names.extend(
                    value()?
                        .split(',')
                        .filter(|n| !n.is_empty())
                        .map(str::to_string),
                ),
                "--webhook-unauthenticated-approvals" => out.unauthenticated_approvals = true,
                other => anyhow::bail!("unknown argument {other}; {USAGE}"),
            }
        }
        Ok(out)
    }

    /// Where the webhook's serving certificate comes from: files mounted by cert-manager, or
    /// made and rotated by the controller itself.
    fn webhook_cert(&self) -> anyhow::Result<http::WebhookCert> {
        if let Some(dir) = &self.cert_dir {
            return Ok(http::WebhookCert::Files {
                dir: dir.clone(),
                reload_every: std::time::Duration::from_secs(60),
            });
        }
        let namespace = std::env::var("POD_NAMESPACE").map_err(|_| {
            anyhow::anyhow!("--webhook-addr without --webhook-cert-dir needs POD_NAMESPACE")
        })?;
        anyhow::ensure!(
            !self.cert_names.is_empty(),
            "--webhook-addr without --webhook-cert-dir needs --webhook-cert-names"
        );
        Ok(http::WebhookCert::SelfSigned(http::tls::SelfSigned {
            namespace,
            secret: self.cert_secret.clone(),
            webhook_configuration: self.webhook_configuration.clone(),
            names: self.cert_names.clone(),
            validity: http::tls::VALIDITY_SECONDS,
        }))
    }

    /// Who may call the webhook: the API server, by its client certificate, when a client CA
    /// is given.
    fn client_auth(&self) -> Option<http::ClientAuth> {
        Some(http::ClientAuth {
            ca_file: self.client_ca.clone()?,
            names: self.client_names.clone(),
        })
    }

    /// The approval key the webhook may stamp with: only when the API server authenticates
    /// to it, or when that was waived on purpose (then any pod that reaches the port can get a
    /// stamp for any user it names; docs/security.md).
    fn stamping_key(&self, key: Option<approval::Key>) -> Option<approval::Key> {
        if self.client_ca.is_some() {
            return key;
        }
        if self.unauthenticated_approvals {
            tracing::warn!(
                "--webhook-unauthenticated-approvals: the webhook stamps approvals for any caller \
                 that reaches its port; restrict it with the chart's NetworkPolicy"
            );
            return key;
        }
        tracing::warn!(
            "no --webhook-client-ca: the webhook does not stamp approvals (a caller on the pod \
             network could claim any user); see docs/operations.md"
        );
        None
    }
}

/// The cluster's executor pod settings, checked as a flow's are: a typo or a reserved label
/// stops the controller at start rather than being ignored.
fn executor_defaults(json: &str) -> anyhow::Result<ExecutorOptions> {
    let mut diags = pseudoflow_crd::Diagnostics::default();
    let raw: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| anyhow::anyhow!("--executor-defaults is not JSON: {e}"))?;
    // Checked where a flow's are, so unknown fields are refused by the same schema walk.
    let spec = serde_json::json!({"options": {"executor": raw}});
    let mut structure = pseudoflow_crd::Diagnostics::default();
    pseudoflow_crd::schema::check_spec_structure(&spec, "executor", &mut structure);
    for d in structure.errors() {
        if let Some(path) = d.path.strip_prefix("executor.options.") {
            diags.error(path, d.message.clone());
        }
    }
    let defaults: Option<ExecutorOptions> = serde_json::from_value(raw).ok();
    if let Some(d) = &defaults {
        d.validate(&mut pseudoflow_crd::check::Ctx::new("executor", &mut diags));
    }
    match defaults {
        Some(d) if !diags.has_errors() => Ok(d),
        _ => {
            let errors: Vec<String> = diags.errors().map(ToString::to_string).collect();
            anyhow::bail!("--executor-defaults: {}", errors.join("; "))
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let args = Args::parse()?;
    let config = kube::Config::infer().await?;
    let client = kube::Client::try_from(config.clone())?;
    let metrics = Arc::new(Metrics::default());
    let allowed: Vec<&str> = args.node_step_namespaces.names().collect();
    tracing::info!("node steps allowed in namespaces {allowed:?} labelled enforce=privileged");
    let mut ctx = Context::new(client.clone(), args.image.clone(), metrics.clone())
        .with_node_step_namespaces(args.node_step_namespaces.clone())
        .with_history_limits(args.history)
        .with_executor_defaults(args.executor.clone())
        .with_config(config);
    let key = approval_key(&client).await;
    if let Some(k) = &key {
        ctx = ctx.with_approval_key(k.clone());
    }
    let ctx = Arc::new(ctx);
    let mut state = http::State::new(metrics);
    state.readiness = ctx.readiness.clone();
    if args.leader_election {
        // A standby replica serves the webhook; only the leader's watches must sync.
        state.readiness.set_standby();
    }
    serve_http(&args, &client, state, key).await?;
    run(args, client, ctx).await
}

/// The key approval stamps are signed with (Secret `pseudoflow-approval-key` in the
/// controller's namespace, made on first start). Without it (no POD_NAMESPACE, or the Secret
/// cannot be read or made) no approval is stamped or accepted, and the controller says why.
async fn approval_key(client: &kube::Client) -> Option<approval::Key> {
    let Ok(namespace) = std::env::var("POD_NAMESPACE") else {
        tracing::warn!("no POD_NAMESPACE: approval steps cannot be approved");
        return None;
    };
    match approval::Key::load_or_create(client, &namespace).await {
        Ok(k) => Some(k),
        Err(e) => {
            tracing::warn!("approval key: {e}; approval steps cannot be approved");
            None
        }
    }
}

/// Starts the HTTP servers: the webhook over TLS (when asked for) and, on the plain port,
/// metrics and probes only (the webhook asks the API server authorization questions, so it is
/// served over TLS alone).
async fn serve_http(
    args: &Args,
    client: &kube::Client,
    mut state: http::State,
    key: Option<approval::Key>,
) -> anyhow::Result<()> {
    if let Some(addr) = args.webhook_addr {
        let cert = args.webhook_cert()?;
        let client_auth = args.client_auth();
        if let Some(auth) = &client_auth {
            // A CA that cannot be read stops the start, naming the file.
            auth.verifier()?;
        }
        state.webhook = Some(match args.stamping_key(key) {
            Some(k) if client_auth.is_none() => webhook::Webhook::for_any_caller(client.clone(), k),
            Some(k) => webhook::Webhook::with_key(client.clone(), k),
            None => webhook::Webhook::new(client.clone()),
        });
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let router = http::router(state.clone());
        let client = client.clone();
        tokio::spawn(async move {
            if let Err(e) = http::serve_webhook(client, listener, router, cert, client_auth).await {
                // Without its webhook the controller would refuse every flow change (failure
                // policy Fail): exit so that the Deployment restarts it and the probes say so.
                tracing::error!("webhook server: {e}");
                std::process::exit(1);
            }
        });
    }
    let plain = http::router(http::State {
        webhook: None,
        ..state
    });
    let metrics_addr = args.metrics_addr;
    tokio::spawn(async move {
        if let Err(e) = http::serve_plain(metrics_addr, plain).await {
            tracing::error!("metrics server on {metrics_addr}: {e}");
        }
    });
    Ok(())
}

/// Runs the controllers until SIGTERM: at once, or with `--leader-election` only while this
/// replica holds the Lease (losing it exits; SIGTERM releases it for a successor).
async fn run(args: Args, client: kube::Client, ctx: Arc<Context>) -> anyhow::Result<()> {
    let namespaces = args.namespaces;
    let mut term = signal(SignalKind::terminate())?;
    if !args.leader_election {
        tokio::select! {
            _ = run_controllers(ctx, namespaces) => {}
            _ = term.recv() => {}
        }
        return Ok(());
    }
    let lease_namespace = args.lease_namespace.ok_or_else(|| {
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
