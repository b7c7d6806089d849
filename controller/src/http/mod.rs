//! The controller's one HTTP server (axum on hyper): `/metrics` (Prometheus text, encoded by
//! `prometheus-client`), `/healthz` (the process answers), `/readyz` (its watches have synced,
//! or it is a standby replica waiting for the lease, which can still serve the webhook), the
//! validating admission webhook (`/validate`) and the mutating one that stamps approvals
//! (`/mutate`). The same router is served on a plain listener
//! (metrics and probes, `--metrics-addr`) and on a TLS listener (`--webhook-addr`), whose
//! certificate [`tls`] makes, stores, reuses and rotates. What a caller may cost it is bounded
//! ([`bounds`]), and who may call it is checked when a client CA is configured
//! ([`client_auth`]).

pub mod bounds;
pub mod client_auth;
pub mod plain;
mod server;
pub mod tls;

pub use client_auth::ClientAuth;
pub use server::serve_tls;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::State as Extract;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;

use crate::metrics::Metrics;

/// Whether the process can serve: every watch it started has synced, or it stands by for the
/// lease (the webhook still works there, and only the leader runs controllers).
#[derive(Debug, Default)]
pub struct Readiness {
    /// Watches started and not yet synced.
    pending: AtomicUsize,
    /// Some watch was started, or the process stands by.
    started: AtomicBool,
}

impl Readiness {
    /// A watch starts: not ready until [`Synced::done`] is called on what this returns.
    pub fn watch_started(self: &Arc<Self>) -> Synced {
        self.pending.fetch_add(1, Ordering::SeqCst);
        self.started.store(true, Ordering::SeqCst);
        Synced(self.clone())
    }

    /// The process stands by (leader election, no lease yet): ready to serve the webhook.
    pub fn set_standby(&self) {
        self.started.store(true, Ordering::SeqCst);
    }

    /// Ready: something started and nothing is still syncing.
    pub fn is_ready(&self) -> bool {
        self.started.load(Ordering::SeqCst) && self.pending.load(Ordering::SeqCst) == 0
    }
}

/// One watch's initial sync (see [`Readiness::watch_started`]).
#[derive(Debug)]
pub struct Synced(Arc<Readiness>);

impl Synced {
    /// The watch has listed everything once.
    pub fn done(self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the handlers share.
#[derive(Clone)]
pub struct State {
    /// The controller's metrics.
    pub metrics: Arc<Metrics>,
    /// See [`Readiness`].
    pub readiness: Arc<Readiness>,
    /// Authorizes approvals; `None` serves no webhook (404).
    pub webhook: Option<Arc<crate::webhook::Webhook>>,
    /// The body bytes the admission routes may hold at once (see [`bounds`]).
    pub budget: bounds::Budget,
}

impl State {
    /// State for `metrics`, not ready yet, without a webhook.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        State {
            metrics,
            readiness: Arc::default(),
            webhook: None,
            budget: bounds::Budget::default(),
        }
    }
}

impl axum::extract::FromRef<State> for crate::webhook::Admission {
    fn from_ref(state: &State) -> Self {
        crate::webhook::Admission(state.webhook.clone())
    }
}

/// The routes: `/metrics`, `/healthz`, `/readyz`, `/validate`, `/mutate`. The admission
/// routes read their bodies under [`bounds::bounded_body`].
pub fn router(state: State) -> Router {
    let admission = Router::new()
        .route("/validate", post(crate::webhook::handle))
        .route("/mutate", post(crate::webhook::stamp::handle))
        .layer(axum::extract::DefaultBodyLimit::max(bounds::MAX_BODY_BYTES))
        .route_layer(axum::middleware::from_fn_with_state(
            state.budget.clone(),
            bounds::bounded_body,
        ));
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(admission)
        .with_state(state)
}

async fn metrics(Extract(state): Extract<State>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )],
        state.metrics.render(),
    )
}

async fn readyz(Extract(state): Extract<State>) -> impl IntoResponse {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "watches not synced")
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` (always ready) on `addr` over plain HTTP: this
/// server without the webhook, for a controller (the demo's, a test's) that has no certificate.
pub async fn serve_metrics(
    addr: SocketAddr,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
) -> std::io::Result<()> {
    let state = State::new(metrics);
    state.readiness.set_standby();
    serve_plain(addr, router(state)).await
}

/// Serves `router` over plain HTTP on `addr` until the process stops, bounded as
/// [`plain`] says (connections in all and per peer, header timer, connection age).
pub async fn serve_plain(addr: SocketAddr, router: Router) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    plain::serve(listener, router).await
}

/// Where the webhook's serving certificate comes from.
#[derive(Debug, Clone)]
pub enum WebhookCert {
    /// Made, stored and rotated by the controller (see [`tls::SelfSigned`]).
    SelfSigned(tls::SelfSigned),
    /// `tls.crt` and `tls.key` in `dir` (a Secret cert-manager keeps), reloaded every
    /// `reload_every` (a minute in the controller) so a renewal is served without a restart.
    Files {
        /// The mounted Secret's directory.
        dir: std::path::PathBuf,
        /// How often the files are read again.
        reload_every: std::time::Duration,
    },
}

/// Loads (or makes) the webhook's certificate, then serves `router` over TLS on `listener`,
/// keeping the certificate current, to the callers `client_auth` accepts (any, without it).
/// Returns an error only if the first certificate or the client CA cannot be had.
pub async fn serve_webhook(
    client: kube::Client,
    listener: tokio::net::TcpListener,
    router: Router,
    cert: WebhookCert,
    client_auth: Option<ClientAuth>,
) -> anyhow::Result<()> {
    let current = match cert {
        WebhookCert::SelfSigned(cfg) => {
            let bundle = cfg.ensure(&client, tls::unix_now()).await?;
            let current = tls::Current::new(bundle.certified_key()?);
            tokio::spawn(cfg.keep(
                client,
                current.clone(),
                bundle,
                std::time::Duration::from_secs(3600),
            ));
            current
        }
        WebhookCert::Files { dir, reload_every } => {
            let current = tls::Current::new(tls::load_files(&dir)?);
            tokio::spawn(tls::watch_files(dir, current.clone(), reload_every));
            current
        }
    };
    serve_tls(listener, router, current, client_auth).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(router: &Router, path: &str) -> (StatusCode, String, Option<String>) {
        let resp = router
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let ct = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap(), ct)
    }

    #[tokio::test]
    async fn metrics_healthz_and_readyz_until_every_watch_synced() {
        let metrics = Arc::new(Metrics::default());
        metrics.run_finished("ns/a", "Succeeded");
        let state = State::new(metrics.clone());
        let readiness = state.readiness.clone();
        let router = router(state);
        let (code, body, ct) = get(&router, "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(body, metrics.render());
        assert!(body.contains("pseudoflow_runs_total{flow=\"ns/a\",status=\"Succeeded\"} 1\n"));
        assert_eq!(
            ct.as_deref(),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
        // Nothing started: not ready.
        assert_eq!(
            get(&router, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        let a = readiness.watch_started();
        let b = readiness.watch_started();
        a.done();
        assert_eq!(
            get(&router, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        b.done();
        assert_eq!(get(&router, "/readyz").await.0, StatusCode::OK);
        assert_eq!(get(&router, "/nope").await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn the_webhook_reads_a_review_larger_than_axums_default_limit() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let mut state = State::new(Arc::default());
        state.webhook = Some(crate::webhook::Webhook::new(
            kube::Client::try_from(config).unwrap(),
        ));
        let big = "x".repeat(3 << 20);
        let review = create_review(
            serde_json::json!({"name": "f", "namespace": "t"}),
            serde_json::json!({"steps": [{"type": "log", "message": big}]}),
        );
        let resp = router(state)
            .oneshot(
                Request::post("/validate")
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(serde_json::to_vec(&review).unwrap()))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["response"]["uid"], "u", "{answer}");
    }

    #[tokio::test]
    async fn both_webhooks_deny_a_review_past_the_decode_budget_naming_it_with_its_uid() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let mut state = State::new(Arc::default());
        state.webhook = Some(crate::webhook::Webhook::new(
            kube::Client::try_from(config).unwrap(),
        ));
        let router = router(state);
        // 3 MiB of one-key objects: ~300 MiB as a JSON tree.
        let items = vec![serde_json::json!({"a": 0}); (3 << 20) / 8];
        let review = create_review(
            serde_json::json!({"name": "f", "namespace": "t"}),
            serde_json::json!({"steps": [{"type": "loop", "forEach": items, "steps": []}]}),
        );
        let body = serde_json::to_vec(&review).unwrap();
        assert!(body.len() < bounds::MAX_BODY_BYTES);
        for path in ["/validate", "/mutate"] {
            let resp = router
                .clone()
                .oneshot(
                    Request::post(path)
                        .header(header::CONTENT_TYPE, "application/json")
                        .body(Body::from(body.clone()))
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            let answer = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap();
            let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
            assert_eq!(answer["response"]["uid"], "u", "{path}: {answer}");
            assert_eq!(answer["response"]["allowed"], false, "{path}: {answer}");
            let why = answer["response"]["status"]["message"].as_str().unwrap();
            assert!(why.contains("decode budget"), "{path}: {why}");
        }
    }

    /// An AdmissionReview of user `u` creating flow t/f with `metadata` and `spec`.
    fn create_review(metadata: serde_json::Value, spec: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "name": "f", "namespace": "t", "operation": "CREATE",
                "kind": {"group": "ops.example.com", "version": "v1alpha1", "kind": "PseudoFlow"},
                "resource": {"group": "ops.example.com", "version": "v1alpha1", "resource": "pseudoflows"},
                "userInfo": {"username": "u"},
                "object": {"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
                    "metadata": metadata, "spec": spec},
            }
        })
    }

    #[tokio::test]
    async fn without_a_webhook_validate_is_not_found() {
        let resp = router(State::new(Arc::default()))
            .oneshot(
                Request::post("/validate")
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from("{}"))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_ne!(resp.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn mutate_refuses_a_client_written_stamp_and_is_not_served_without_the_webhook() {
        let review = create_review(
            serde_json::json!({"name": "f", "namespace": "t",
                "annotations": {crate::approval::APPROVED_BY: "{}"}}),
            serde_json::json!({"steps": []}),
        );
        let post = || {
            Request::post("/mutate")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&review).unwrap()))
                .unwrap()
        };
        let resp = router(State::new(Arc::default()))
            .oneshot(post())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let mut state = State::new(Arc::default());
        state.webhook = Some(crate::webhook::Webhook::with_key(
            kube::Client::try_from(config).unwrap(),
            crate::approval::Key::random(),
        ));
        let resp = router(state).oneshot(post()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        let why = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(
            why.contains("written by the admission webhook only"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn mutate_stamps_no_rollout_action_for_a_caller_not_proven_to_be_the_api_server() {
        use pseudoflow_crd::rollout::{ROLLOUT_ANNOTATION, ROLLOUT_BY_ANNOTATION};
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let mut state = State::new(Arc::default());
        state.webhook = Some(crate::webhook::Webhook::with_key(
            kube::Client::try_from(config).unwrap(),
            crate::approval::Key::random(),
        ));
        let router = router(state);
        for (annotations, refusal) in [
            (
                serde_json::json!({ROLLOUT_ANNOTATION: "undo"}),
                crate::webhook::UNAUTHENTICATED_APPROVAL,
            ),
            (
                serde_json::json!({ROLLOUT_BY_ANNOTATION: "{}"}),
                "written by the admission webhook only",
            ),
        ] {
            let review = create_review(
                serde_json::json!({"name": "f", "namespace": "t", "annotations": annotations}),
                serde_json::json!({"steps": []}),
            );
            let resp = router
                .clone()
                .oneshot(
                    Request::post("/mutate")
                        .header(header::CONTENT_TYPE, "application/json")
                        .body(Body::from(serde_json::to_vec(&review).unwrap()))
                        .unwrap(),
                )
                .await
                .unwrap();
            let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap();
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(answer["response"]["allowed"], false, "{answer}");
            assert!(answer["response"]["patch"].is_null(), "no stamp: {answer}");
            let why = answer["response"]["status"]["message"].as_str().unwrap();
            assert!(why.contains(refusal), "{why}");
        }
    }

    #[tokio::test]
    async fn a_standby_replica_is_ready() {
        let state = State::new(Arc::default());
        state.readiness.set_standby();
        assert_eq!(get(&router(state), "/readyz").await.0, StatusCode::OK);
    }
}
