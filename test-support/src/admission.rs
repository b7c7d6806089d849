//! What the admission suites (`admission/`, `adversarial/approvals.rs`, `argocd.rs`) share: a
//! webhook entry that only matches flows in the test's namespace, kubectl off the runtime, and
//! the two users whose rights differ only by `approve`.

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use kube::Client;
use pseudoflow_controller::approval::Key;
use pseudoflow_controller::http::{self, tls};
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::webhook::Webhook;
use pseudoflow_controller::{run_controller, Context};
use serde_json::{json, Value};

use crate::IMAGE;

/// One webhook for flows in `ns` only, served at `https://127.0.0.1:port/<path>`; it fails
/// closed, as the chart's does.
pub fn webhook_entry(port: u16, ns: &str, path: &str) -> Value {
    json!({
        "name": "pseudoflows.ops.example.com",
        "clientConfig": {"url": format!("https://127.0.0.1:{port}/{path}")},
        "rules": [{
            "apiGroups": ["ops.example.com"], "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"], "resources": ["pseudoflows"],
            "scope": "Namespaced",
        }],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    })
}

/// The certificate the controller makes for itself (CA and serving pair, kept in a Secret in
/// `ns`) for a webhook at 127.0.0.1, its CA written into the configurations named `name`.
pub fn self_signed(ns: &str, name: &str) -> tls::SelfSigned {
    tls::SelfSigned {
        namespace: ns.to_string(),
        secret: "pseudoflow-webhook-tls".into(),
        webhook_configuration: Some(name.to_string()),
        names: vec!["127.0.0.1".into()],
        validity: tls::VALIDITY_SECONDS,
    }
}

/// Who may call a test's webhook: the testenv API server, by the client certificate it presents
/// to admission webhooks (testenv's admission configuration), as the chart configures it.
pub fn api_server_only() -> http::ClientAuth {
    http::ClientAuth {
        ca_file: crate::env().webhook_client_ca(),
        names: vec![pseudoflow_testenv::certs::WEBHOOK_CLIENT_CN.to_string()],
    }
}

/// Serves the controller's router with `webhook` on `listener` with `cert`, as the controller
/// does (standing by: no leader needed to answer admission calls), to the API server only.
pub fn serve(
    client: &Client,
    listener: tokio::net::TcpListener,
    webhook: Arc<Webhook>,
    cert: http::WebhookCert,
) {
    let mut state = http::State::new(Arc::new(Metrics::default()));
    state.webhook = Some(webhook);
    state.readiness.set_standby();
    let router = http::router(state);
    tokio::spawn(http::serve_webhook(
        client.clone(),
        listener,
        router,
        cert,
        Some(api_server_only()),
    ));
}

/// A TLS client as a pod on the network would make it: trusting the webhook's CA `ca_pem`,
/// presenting `identity` (certificate and key PEM) when given. Shared by every suite that calls
/// the webhook port directly, so each sees the same client.
pub fn tls_client(
    ca_pem: &str,
    identity: Option<(&str, &str)>,
) -> std::io::Result<tokio_rustls::TlsConnector> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.map_err(std::io::Error::other)?)
            .map_err(std::io::Error::other)?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => {
            let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(std::io::Error::other)?;
            let key =
                PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(std::io::Error::other)?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(std::io::Error::other)?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// A TLS connection to `127.0.0.1:port` with `tls` (the handshake's error if it is refused).
pub async fn connect_tls(
    tls: &tokio_rustls::TlsConnector,
    port: u16,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let sock = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name =
        rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(std::io::Error::other)?;
    tls.connect(name, sock).await
}

/// POSTs `body` to `path` on a new connection made with `tls`; the whole response (status line
/// to body), or the error that stopped it (a refused handshake, a closed connection).
pub async fn post_tls(
    tls: &tokio_rustls::TlsConnector,
    port: u16,
    path: &str,
    body: &[u8],
) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = connect_tls(tls, port).await?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// POSTs `body` to `https://127.0.0.1:port/path` as a pod on the network would (trusting the
/// webhook's CA `ca_pem`), with the client certificate and key files `identity` when given; the
/// whole response, or the error that stopped it (a refused handshake, a closed connection).
pub async fn post_from_the_network(
    port: u16,
    ca_pem: &str,
    identity: Option<(&std::path::Path, &std::path::Path)>,
    path: &str,
    body: &[u8],
) -> std::io::Result<String> {
    let pems = match identity {
        Some((cert, key)) => Some((
            std::fs::read_to_string(cert)?,
            std::fs::read_to_string(key)?,
        )),
        None => None,
    };
    let identity = pems.as_ref().map(|(c, k)| (c.as_str(), k.as_str()));
    post_tls(&tls_client(ca_pem, identity)?, port, path, body).await
}

/// [`crate::kubectl`] off the runtime (the webhook serving the API server's calls runs on it).
pub async fn kubectl_async(args: &[&str]) -> (bool, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::kubectl(&args)
    })
    .await
    .unwrap()
}

/// `tenant` may edit flows in `ns`; `boss` may edit and `approve`.
pub async fn editor_and_approver(client: &Client, ns: &str) {
    let rbac = format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: flow-editor, namespace: {ns}}}
rules:
  - apiGroups: [ops.example.com]
    resources: [pseudoflows]
    verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: flow-approver, namespace: {ns}}}
rules:
  - apiGroups: [ops.example.com]
    resources: [pseudoflows]
    verbs: [approve]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: editors, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: flow-editor}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: tenant}}
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: boss}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: approvers, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: flow-approver}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: boss}}
"#
    );
    pseudoflow_testenv::apply::apply_text(client, &rbac, None)
        .await
        .unwrap();
}

/// A controller for `ns` accepting approvals stamped with `key`.
pub fn start_controller_with_key(
    client: &Client,
    ns: &str,
    key: &Key,
) -> tokio::task::JoinHandle<()> {
    let ctx = Context::new(client.clone(), IMAGE.into(), Arc::new(Metrics::default()))
        .with_approval_key(key.clone());
    tokio::spawn(run_controller(Arc::new(ctx), Some(ns.to_string())))
}

/// Both webhooks for `ns` (stamping with `key`) on a free loopback port, registered in a
/// validating and a mutating configuration named after the namespace; returns that name.
pub async fn start_webhooks(client: &Client, ns: &str, key: &Key) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let name = format!("pseudoflow-{ns}");
    let vwc: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [webhook_entry(port, ns, "validate")],
    }))
    .unwrap();
    let mut mutating = webhook_entry(port, ns, "mutate");
    mutating["reinvocationPolicy"] = json!("Never");
    let mwc: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [mutating],
    }))
    .unwrap();
    let pp = PostParams::default();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&pp, &vwc)
        .await
        .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&pp, &mwc)
        .await
        .unwrap();
    let cert = http::WebhookCert::SelfSigned(self_signed(ns, &name));
    let webhook = Webhook::with_key(client.clone(), key.clone());
    serve(client, listener, webhook, cert);
    name
}
