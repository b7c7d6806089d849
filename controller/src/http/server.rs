//! The webhook's TLS listener: each connection takes one of [`bounds::MAX_CONNECTIONS`] places
//! (one more is closed at once), must finish its handshake — with the API server's client
//! certificate when [`ClientAuth`] is configured — within [`bounds::HANDSHAKE_TIMEOUT`], and
//! its requests' headers within [`bounds::HEADER_TIMEOUT`]; bodies are bounded by the router's
//! [`bounds::bounded_body`]. A failed `accept` (too many open files) is waited out, not fatal.

use std::sync::Arc;

use axum::Router;
use tokio::sync::Semaphore;

use super::bounds;
use super::client_auth::ClientAuth;
use super::tls;
use crate::webhook::Caller;

/// Serves `router` over TLS on `listener`, with the certificate `certs` holds at each handshake
/// (so a rotated one is used from the next connection on), accepting only callers `client_auth`
/// accepts when given.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    router: Router,
    certs: Arc<tls::Current>,
    client_auth: Option<ClientAuth>,
) -> std::io::Result<()> {
    let builder = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?;
    let mut config = match &client_auth {
        Some(auth) => builder
            .with_client_cert_verifier(auth.verifier().map_err(std::io::Error::other)?)
            .with_cert_resolver(certs),
        None => builder.with_no_client_auth().with_cert_resolver(certs),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let places = Arc::new(Semaphore::new(bounds::MAX_CONNECTIONS));
    let client_auth = client_auth.map(Arc::new);
    loop {
        let sock = match listener.accept().await {
            Ok((sock, _)) => sock,
            Err(e) => {
                tracing::warn!("webhook: accepting a connection: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(place) = places.clone().try_acquire_owned() else {
            tracing::debug!(
                "webhook: {} connections open, one closed",
                bounds::MAX_CONNECTIONS
            );
            continue;
        };
        let (acceptor, router, auth) = (acceptor.clone(), router.clone(), client_auth.clone());
        tokio::spawn(async move {
            serve_connection(acceptor, sock, router, auth).await;
            drop(place);
        });
    }
}

/// One connection: the handshake, the caller's name checked, then HTTP/1.1 until it closes.
async fn serve_connection(
    acceptor: tokio_rustls::TlsAcceptor,
    sock: tokio::net::TcpStream,
    router: Router,
    client_auth: Option<Arc<ClientAuth>>,
) {
    let tls = tokio::time::timeout(bounds::HANDSHAKE_TIMEOUT, acceptor.accept(sock)).await;
    let Ok(Ok(tls)) = tls else { return };
    let caller = match client_auth {
        Some(auth) => {
            let peer = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
            if !peer.is_some_and(|c| auth.accepts(c)) {
                let names = peer.map(super::client_auth::cert_names).unwrap_or_default();
                tracing::warn!("webhook: refused a client certificate for {names:?}");
                return;
            }
            Caller::ApiServer
        }
        None => Caller::Unauthenticated,
    };
    // Each request carries who the connection's peer proved to be.
    let router =
        tower::ServiceExt::map_request(router, move |mut req: axum::extract::Request<_>| {
            req.extensions_mut().insert(caller);
            req
        });
    let service = hyper_util::service::TowerToHyperService::new(router);
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(bounds::HEADER_TIMEOUT)
        .max_buf_size(bounds::MAX_READ_BUFFER)
        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
        .await;
}
