//! The in-process controller of `make demo`, started as the chart installs it: the validating
//! and mutating admission webhooks registered with the API server (a `url` client config to
//! this process on loopback, as the chart's `webhook.url` allows; its certificate made by the
//! controller and its CA written into both configurations), the approval key (Secret
//! `pseudoflow-approval-key` in the controller's namespace) and the client configuration a
//! bound flow's ServiceAccount is impersonated from. Without them the demo would accept flows
//! that do not compile, wait forever at approval steps and refuse every bound flow.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, Patch, PatchParams};
use pseudoflow_controller::http::{self, tls};
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{approval, run_controller, webhook, Context};
use pseudoflow_testenv::apply::apply_text;
use pseudoflow_testenv::TestEnv;
use serde_json::{json, Value};

/// The controller's namespace, as the chart's release namespace: its approval key and webhook
/// certificate live there.
pub const NAMESPACE: &str = "pseudoflow-system";

/// The name of both webhook configurations (the chart's `pseudoflow`).
const CONFIGURATION: &str = "pseudoflow";

/// What the demo tells the user about the running controller.
pub struct Started {
    /// `https://127.0.0.1:PORT`, where the API server calls the webhooks.
    pub webhook_url: String,
}

/// Starts the controller with its webhooks, approval key and client configuration, running
/// steps in `image`; node steps allowed in kube-system (the controller's half of that opt-in).
pub async fn start(env: &TestEnv, client: &kube::Client, image: &str) -> Result<Started> {
    apply_text(
        client,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NAMESPACE}}}\n"),
        None,
    )
    .await?;
    let key = approval::Key::load_or_create(client, NAMESPACE)
        .await
        .context("the approval key")?;
    let metrics = Arc::new(Metrics::default());
    let webhook_url = serve_webhooks(env, client, metrics.clone(), key.clone()).await?;
    tokio::spawn(pseudoflow_controller::http::serve_metrics(
        "127.0.0.1:8080".parse()?,
        metrics.clone(),
    ));
    let kubeconfig = kube::config::Kubeconfig::read_from(env.kubeconfig_path())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let ctx = Context::new(client.clone(), image.into(), metrics)
        .with_node_step_namespaces(["kube-system"].into_iter().collect())
        .with_approval_key(key)
        .with_config(config);
    tokio::spawn(run_controller(Arc::new(ctx), None));
    Ok(Started { webhook_url })
}

/// Registers both webhook configurations for every namespace, then serves them over TLS on a
/// free loopback port with the certificate the controller makes (its CA written into both),
/// and waits until the API server calls them. Returns the base URL.
async fn serve_webhooks(
    env: &TestEnv,
    client: &kube::Client,
    metrics: Arc<Metrics>,
    key: approval::Key,
) -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("https://127.0.0.1:{}", listener.local_addr()?.port());
    register(client, &url).await?;
    let mut state = http::State::new(metrics);
    state.webhook = Some(webhook::Webhook::with_key(client.clone(), key));
    // The webhook answers whether or not the watches have synced, as a standby replica's.
    state.readiness.set_standby();
    let cert = http::WebhookCert::SelfSigned(tls::SelfSigned {
        namespace: NAMESPACE.into(),
        secret: "pseudoflow-webhook-tls".into(),
        webhook_configuration: Some(CONFIGURATION.into()),
        names: vec!["127.0.0.1".into()],
        validity: tls::VALIDITY_SECONDS,
    });
    let (client2, router) = (client.clone(), http::router(state));
    // Only the API server may call it (its admission client certificate), as the chart's
    // `webhook.clientAuth` sets it up: a stamp is never minted for a caller on the network.
    let api_server_only = http::ClientAuth {
        ca_file: env.webhook_client_ca(),
        names: vec![pseudoflow_testenv::certs::WEBHOOK_CLIENT_CN.to_string()],
    };
    tokio::spawn(async move {
        let served = http::serve_webhook(client2, listener, router, cert, Some(api_server_only));
        if let Err(e) = served.await {
            // Every flow change would be refused (failure policy Fail): say so and stop.
            eprintln!("the admission webhook stopped: {e}");
            std::process::exit(1);
        }
    });
    wait_answering(client).await?;
    Ok(url)
}

/// One webhook entry as the chart writes it, called at `url` (`/validate` or `/mutate`).
fn entry(name: &str, url: String) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": url},
        "rules": [{"apiGroups": ["ops.example.com"], "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"], "resources": ["pseudoflows"],
            "scope": "Namespaced"}],
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    })
}

/// The validating and mutating configurations, as the chart's, each with one webhook at `url`
/// (server-side applied, so that registering again replaces them).
async fn register(client: &kube::Client, url: &str) -> Result<()> {
    let pp = PatchParams::apply("pseudoflow-demo").force();
    let validating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION},
        "webhooks": [entry("pseudoflows.ops.example.com", format!("{url}/validate"))],
    });
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(CONFIGURATION, &pp, &Patch::Apply(&validating))
        .await?;
    let mut mutating = entry("approvals.ops.example.com", format!("{url}/mutate"));
    mutating["reinvocationPolicy"] = json!("Never");
    let mutating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION},
        "webhooks": [mutating],
    });
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(CONFIGURATION, &pp, &Patch::Apply(&mutating))
        .await?;
    Ok(())
}

/// A flow the CRD's schema lets through but that does not compile (a typo nested in a loop's
/// steps), sent as a server-side dry run.
const INVALID: &str = r#"{"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
"metadata": {"name": "webhook-probe", "namespace": "default"},
"spec": {"steps": [{"type": "loop", "forEach": ["a"], "steps": [{"type": "lgo"}]}]}}"#;

/// Waits until the API server calls the validating webhook (its configuration and CA have
/// propagated): a dry run of a flow that does not compile is refused naming its path. `make
/// demo-real` waits so for the chart's.
pub async fn wait_answering(client: &kube::Client) -> Result<()> {
    use kube::api::{DynamicObject, PostParams};
    let flows: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &pseudoflow_controller::flow::flow_resource(),
    );
    let probe: DynamicObject = serde_json::from_str(INVALID)?;
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let t0 = Instant::now();
    loop {
        match flows.create(&pp, &probe).await {
            Err(kube::Error::Api(e))
                if e.message.contains("denied the request")
                    && e.message.contains("spec.steps[0].steps[0].type") =>
            {
                return Ok(());
            }
            other => anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(60),
                "the admission webhook did not answer in 60 s: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
