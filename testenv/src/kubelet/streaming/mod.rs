//! The kubelet's streaming server, which the API server reaches for `pods/exec` and `pods/log`
//! (`kubectl exec`, `kubectl logs`, the `exec` step with `pod`): HTTPS on a loopback port that both
//! sides verify against the testenv CA, HTTP/1.1 with upgrades. One server serves every node: the
//! path names the pod, and the pod names its node.

mod exec;
mod logs;

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{
    CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL, UPGRADE,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::Client;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

use super::KubeletConfig;

/// A response body: a whole text, or a stream (`kubectl logs -f`).
type Body = BoxBody<Bytes, Infallible>;

/// Binds the streaming server on a free loopback port and serves it in the background.
pub(super) async fn start(client: Client, cfg: KubeletConfig) -> Result<u16> {
    let tls = TlsAcceptor::from(Arc::new(server_config(&cfg)?));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (tls, client, cfg) = (tls.clone(), client.clone(), cfg.clone());
            tokio::spawn(async move {
                let stream = match tls.accept(tcp).await {
                    Ok(s) => s,
                    Err(e) => return tracing::warn!("kubelet streaming: TLS handshake: {e}"),
                };
                let service = service_fn(move |req| route(req, client.clone(), cfg.clone()));
                let served = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades()
                    .await;
                if let Err(e) = served {
                    tracing::debug!("kubelet streaming: {e}");
                }
            });
        }
    });
    Ok(port)
}

/// TLS with the kubelet's serving cert, accepting only clients whose cert the testenv CA signed
/// (the API server's `--kubelet-client-certificate`).
fn server_config(cfg: &KubeletConfig) -> Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(&cfg.ca_crt).context("reading the CA")? {
        roots.add(ca?)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()?;
    let chain = CertificateDer::pem_file_iter(&cfg.serving_crt)
        .context("reading the kubelet serving cert")?
        .collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(&cfg.serving_key).context("reading its key")?;
    Ok(rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?)
}

async fn route(
    req: Request<Incoming>,
    client: Client,
    cfg: KubeletConfig,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    Ok(if path.starts_with("/exec/") {
        upgrade_to_exec(req, client, cfg, path, query)
    } else if path.starts_with("/containerLogs/") {
        match logs::respond(&client, &cfg, &path, &query).await {
            Ok(body) => Response::new(body),
            Err(e) => text(StatusCode::NOT_FOUND, format!("{e:#}")),
        }
    } else {
        text(
            StatusCode::NOT_FOUND,
            format!("the testenv kubelet serves exec and containerLogs, not {path}"),
        )
    })
}

/// Answers the WebSocket handshake and runs the exec on the upgraded connection.
fn upgrade_to_exec(
    mut req: Request<Incoming>,
    client: Client,
    cfg: KubeletConfig,
    path: String,
    query: String,
) -> Response<Body> {
    let key = req.headers().get(SEC_WEBSOCKET_KEY).cloned();
    let (Some(key), Some(protocol)) = (key, exec::protocol_of(req.headers())) else {
        return text(
            StatusCode::BAD_REQUEST,
            "exec is served over WebSocket with v5.channel.k8s.io or v4.channel.k8s.io".into(),
        );
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => return tracing::warn!("kubelet exec: upgrade: {e}"),
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        if let Err(e) = exec::serve(ws, client, cfg, &path, &query).await {
            tracing::warn!("kubelet exec: {e:#}");
        }
    });
    let mut resp = Response::new(Full::new(Bytes::new()).boxed());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(CONNECTION, "Upgrade".parse().unwrap());
    h.insert(UPGRADE, "websocket".parse().unwrap());
    h.insert(
        SEC_WEBSOCKET_ACCEPT,
        derive_accept_key(key.as_bytes()).parse().unwrap(),
    );
    h.insert(SEC_WEBSOCKET_PROTOCOL, protocol.parse().unwrap());
    resp
}

fn text(status: StatusCode, message: String) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(message)).boxed());
    *resp.status_mut() = status;
    resp
}

/// A container the streaming server was asked about: where its pod's process state lives.
struct PodContainer {
    namespace: String,
    pod: String,
    container: String,
    /// Whether the pod is Running (has a process, if its image is mapped).
    running: bool,
    dir: PathBuf,
}

impl PodContainer {
    /// Looks the pod up; only its first container is served (the only one testenv runs).
    async fn find(
        client: &Client,
        cfg: &KubeletConfig,
        ns: &str,
        name: &str,
        container: &str,
    ) -> Result<Self> {
        let pod = Api::<Pod>::namespaced(client.clone(), ns)
            .get(name)
            .await
            .with_context(|| format!("pod {ns}/{name}"))?;
        let spec = pod.spec.unwrap_or_default();
        if spec.containers.first().map(|c| c.name.as_str()) != Some(container) {
            bail!(
                "container {container} is not the first container of pod {ns}/{name}; the testenv kubelet runs only that one"
            );
        }
        let running = pod
            .status
            .and_then(|s| s.phase)
            .is_some_and(|p| p == "Running");
        let node = spec.node_name.unwrap_or_default();
        Ok(PodContainer {
            dir: cfg.pod_dir(&node, ns, name),
            namespace: ns.into(),
            pod: name.into(),
            container: container.into(),
            running,
        })
    }
}

impl std::fmt::Display for PodContainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "container {} in pod {}/{}",
            self.container, self.namespace, self.pod
        )
    }
}
