//! What the admission suites (`webhook.rs`, `approval.rs`) share: a webhook entry that only
//! matches flows in the test's namespace, kubectl off the runtime, and the two users whose
//! rights differ only by `approve`.

use std::sync::Arc;

use kube::Client;
use pseudoflow_controller::http::{self, tls};
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::webhook::Webhook;
use serde_json::{json, Value};

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

/// Serves the controller's router with `webhook` on `listener` with `cert`, as the controller
/// does (standing by: no leader needed to answer admission calls).
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
    tokio::spawn(http::serve_webhook(client.clone(), listener, router, cert));
}

/// [`super::kubectl`] off the runtime (the webhook serving the API server's calls runs on it).
pub async fn kubectl_async(args: &[&str]) -> (bool, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        super::kubectl(&args)
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
