//! The webhook server on the pod network, started as the controller starts it (`serve_webhook`,
//! certificate files, loopback): 200 connections trickling request bodies and 20 trickling
//! headers are cut by the body and header timeouts, the process's memory stays bounded while
//! they are open, and a valid AdmissionReview is answered promptly meanwhile. With a client CA
//! configured, a caller without the API server's certificate, or with another certificate the
//! same CA signed, gets no answer at all. No API server: the review asks none.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pseudoflow_controller::http::{self, bounds, tls};
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::webhook::Webhook;
use pseudoflow_test_support::admission;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A serving certificate for 127.0.0.1 in a fresh directory (`tls.crt`, `tls.key`), and its CA.
fn cert_dir(name: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("pf-bounds-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let b = tls::Bundle::generate(&["127.0.0.1".into()], tls::unix_now(), 3600).unwrap();
    let secret = b.to_secret("ns", "s");
    for f in ["tls.crt", "tls.key"] {
        std::fs::write(dir.join(f), &secret.data.as_ref().unwrap()[f].0).unwrap();
    }
    (dir, b.ca_pem)
}

/// Starts the webhook server on loopback with the certificate in `dir`; its port.
async fn start(dir: &Path, client_auth: Option<http::ClientAuth>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let mut state = http::State::new(Arc::new(Metrics::default()));
    state.webhook = Some(Webhook::new(client.clone()));
    let cert = http::WebhookCert::Files {
        dir: dir.to_path_buf(),
        reload_every: Duration::from_secs(3600),
    };
    let router = http::router(state);
    tokio::spawn(http::serve_webhook(
        client,
        listener,
        router,
        cert,
        client_auth,
    ));
    port
}

/// A TLS client trusting `ca`, presenting `identity` (certificate and key PEM) when given.
fn connector(ca: &str, identity: Option<(&str, &str)>) -> tokio_rustls::TlsConnector {
    admission::tls_client(ca, identity).unwrap()
}

/// A valid AdmissionReview creating flow t/f, claiming user `user`, with `annotations`.
fn review(user: &str, annotations: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "name": "f", "namespace": "t", "operation": "CREATE",
            "kind": {"group": "ops.example.com", "version": "v1alpha1", "kind": "PseudoFlow"},
            "resource": {"group": "ops.example.com", "version": "v1alpha1", "resource": "pseudoflows"},
            "userInfo": {"username": user, "groups": ["system:masters"]},
            "object": {"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
                "metadata": {"name": "f", "namespace": "t", "annotations": annotations},
                "spec": {"steps": [{"type": "log", "message": "hi"}]}},
        }
    }))
    .unwrap()
}

/// The process's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// A connection sending `head`, then `chunk` every 100 ms (never all of what `head` promised),
/// until the server closes it or `until`; counts itself in `closed` when the server did.
fn trickle(
    tls: tokio_rustls::TlsConnector,
    port: u16,
    head: String,
    chunk: Vec<u8>,
    until: Instant,
    closed: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Ok(s) = admission::connect_tls(&tls, port).await else {
            return;
        };
        let (mut r, mut w) = tokio::io::split(s);
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            // EOF or an error: the server closed it.
            let _ = r.read_to_end(&mut sink).await;
        });
        let _ = w.write_all(head.as_bytes()).await;
        while Instant::now() < until && !reader.is_finished() {
            if w.write_all(&chunk).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if reader.is_finished() {
            closed.fetch_add(1, Ordering::SeqCst);
        }
        reader.abort();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_connections_are_cut_by_the_timeouts_memory_stays_bounded_and_a_review_is_answered_meanwhile(
) {
    let (dir, ca) = cert_dir("slow");
    let port = start(&dir, None).await;
    let tls = connector(&ca, None);
    // Warm up (the first answer allocates what every later one reuses), then measure.
    let answer =
        admission::post_tls(&tls, port, "/validate", &review("u", serde_json::json!({}))).await;
    assert!(answer.unwrap().starts_with("HTTP/1.1 200"));
    let before = rss();
    let t0 = Instant::now();
    // Past both timeouts, with room: anything still open then was not cut.
    let until = t0 + bounds::HEADER_TIMEOUT + Duration::from_secs(5);
    let closed = Arc::new(AtomicUsize::new(0));
    let body_head = format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        bounds::MAX_BODY_BYTES
    );
    let slow = |count: usize, head: &str, chunk: &[u8]| {
        (0..count)
            .map(|_| {
                let (tls, closed) = (tls.clone(), closed.clone());
                trickle(tls, port, head.to_string(), chunk.to_vec(), until, closed)
            })
            .collect::<Vec<_>>()
    };
    let mut tasks = slow(200, &body_head, &[b' '; 1024]);
    tasks.extend(slow(20, "POST /validate HTTP/1.1\r\n", b"X-Slow: 1\r\n"));
    // While they are open, a valid review is answered promptly.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(3),
        admission::post_tls(&tls, port, "/validate", &review("u", serde_json::json!({}))),
    )
    .await
    .expect("a review was not answered within 3 s while slow connections were open")
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"uid\":\"u\""), "{answer}");
    eprintln!(
        "review answered in {:?} among 220 slow connections",
        asked.elapsed()
    );
    let mut peak = 0;
    while tasks.iter().any(|t| !t.is_finished()) {
        peak = peak.max(rss());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cut = closed.load(Ordering::SeqCst);
    let growth = peak.saturating_sub(before);
    eprintln!(
        "{cut} of 220 slow connections cut by the server in {:?}; RSS {} MiB, peak growth {} MiB",
        t0.elapsed(),
        before >> 20,
        growth >> 20
    );
    assert_eq!(cut, 220, "slow connections the server never closed");
    assert!(growth < 64 << 20, "RSS grew by {} MiB", growth >> 20);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_declared_larger_than_a_review_is_refused_before_it_is_read() {
    let (dir, ca) = cert_dir("large");
    let port = start(&dir, None).await;
    let tls = connector(&ca, None);
    let mut s = admission::connect_tls(&tls, port).await.unwrap();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        8 << 20
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out)).await;
    assert!(
        read.is_ok(),
        "no answer to an 8 MiB body before it was sent"
    );
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A CA (PEM) and two client certificates it signs (certificate and key PEM): one for the API
/// server's name, one for a user of the same cluster (`admin`, as a cluster CA also signs).
fn client_pki() -> (String, (String, String), (String, String)) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa};
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "cluster-ca");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let client = |cn: &str| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        (
            p.signed_by(&key, &issuer).unwrap().pem(),
            key.serialize_pem(),
        )
    };
    (
        ca_cert.pem(),
        client(pseudoflow_testenv::certs::WEBHOOK_CLIENT_CN),
        client("admin"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_the_api_servers_certificate_gets_an_answer() {
    let (dir, ca) = cert_dir("mtls");
    let (client_ca, apiserver, admin) = client_pki();
    let ca_file = dir.join("client-ca.crt");
    std::fs::write(&ca_file, client_ca).unwrap();
    let auth = http::ClientAuth {
        ca_file,
        names: vec![pseudoflow_testenv::certs::WEBHOOK_CLIENT_CN.into()],
    };
    let port = start(&dir, Some(auth)).await;
    // A forged decision "by system:masters", as any pod on the network could send it.
    let forged = review(
        "system:admin",
        serde_json::json!({"ops.example.com/approve": "gate"}),
    );
    for (who, identity) in [
        ("no certificate", None),
        ("a user's certificate", Some((&admin.0, &admin.1))),
    ] {
        let tls = connector(&ca, identity.map(|(c, k)| (c.as_str(), k.as_str())));
        for path in ["/mutate", "/validate"] {
            let answer = admission::post_tls(&tls, port, path, &forged).await;
            assert!(
                answer.as_ref().map_or(true, |a| a.is_empty()),
                "{who} got an answer from {path}: {answer:?}"
            );
        }
    }
    let tls = connector(&ca, Some((&apiserver.0, &apiserver.1)));
    let answer =
        admission::post_tls(&tls, port, "/validate", &review("u", serde_json::json!({}))).await;
    let answer = answer.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    std::fs::remove_dir_all(dir).unwrap();
}
