//! Attacks on what an admission review costs the webhook in memory, end to end through testenv's
//! real kube-apiserver (both webhooks, the API server's client certificate, as the chart runs
//! them): anyone who may `create pseudoflows` sends 10 flow creates at once, each ~3 MiB and
//! built to cost the most once decoded (1.4 M tiny items, 370 k one-key objects, 900 k one-item
//! lists, a list nested 2,000 deep). Each is refused with a denial naming the decode budget
//! (not a webhook failure), the webhook's process stays far below the chart's 512 MiB limit, and a
//! valid flow is still admitted afterwards.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::admission::start_webhooks;
use crate::common::approval::remove_webhooks;
use crate::common::*;
use kube::Client;
use pseudoflow_controller::approval::Key;
use serde_json::json;

const URL: &str = "/apis/ops.example.com/v1alpha1/namespaces";

/// Just under the API server's 3 MiB request limit, with room for the object around the list.
const BODY: usize = 3_000_000;

/// A flow create whose one `loop` has `forEach` = `count` times `item` (as many as fill ~[`BODY`]
/// bytes when `None`).
fn flow(ns: &str, name: &str, item: &str, count: Option<usize>) -> Vec<u8> {
    let head = format!(
        r#"{{"apiVersion":"ops.example.com/v1alpha1","kind":"PseudoFlow","metadata":{{"name":"{name}","namespace":"{ns}"}},"spec":{{"steps":[{{"type":"loop","forEach":["#
    );
    let tail = r#"],"steps":[{"type":"log","message":"x"}]}]}}"#;
    let mut body = head.into_bytes();
    let n = count.unwrap_or((BODY - body.len() - tail.len()) / (item.len() + 1));
    for i in 0..n {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item.as_bytes());
    }
    body.extend_from_slice(tail.as_bytes());
    body
}

/// A flow create whose `forEach` holds one list nested `depth` deep.
fn deep(ns: &str, name: &str, depth: usize) -> Vec<u8> {
    let item = format!("{}0{}", "[".repeat(depth), "]".repeat(depth));
    flow(ns, name, &item, Some(1))
}

/// Makes a flow create for (namespace, name).
type Make = fn(&str, &str) -> Vec<u8>;

/// Posts a flow create as raw bytes (never decoded here); the API server's answer.
pub(crate) async fn create_raw(
    client: &Client,
    ns: &str,
    body: Vec<u8>,
) -> Result<String, kube::Error> {
    let req = http::Request::post(format!("{URL}/{ns}/pseudoflows"))
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    client.request_text(req).await
}

/// Held by a test of this binary while it measures the process's memory: the tests run at once
/// in one process, and one's growth would count in another's measure.
pub(crate) static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The process's resident memory now, in bytes.
pub(crate) fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Samples [`rss`] every 10 ms on its own thread (the webhook's decoding keeps the runtime's
/// workers busy) until `stop`; the peak.
pub(crate) fn sample_peak(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::SeqCst) {
            peak = peak.max(rss());
            std::thread::sleep(Duration::from_millis(10));
        }
        peak.max(rss())
    })
}

/// Waits until the validating webhook answers for `ns` (its configuration has propagated): a
/// dry-run create of a flow with a typo is refused as invalid.
pub(crate) async fn wait_validating(client: &Client, ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = serde_json::to_vec(&json!({"apiVersion": "ops.example.com/v1alpha1",
            "kind": "PseudoFlow", "metadata": {"name": "probe", "namespace": ns},
            "spec": {"steps": [{"type": "lgo", "message": "x"}]}}))
        .unwrap();
        let req = http::Request::post(format!("{URL}/{ns}/pseudoflows?dryRun=All"))
            .header("content-type", "application/json")
            .body(body)
            .unwrap();
        match client.request_text(req).await {
            Err(e) if e.to_string().contains("is invalid") => return,
            other => assert!(
                Instant::now() < deadline,
                "the webhook never answered: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_concurrent_3_mib_worst_case_reviews_are_refused_by_the_decode_budget_in_bounded_memory(
) {
    let (client, ns) = prepare("admission-memory", json!([]), json!([])).await;
    let name = start_webhooks(&client, &ns, &Key::random()).await;
    wait_validating(&client, &ns).await;
    // The attack bodies, built as bytes before measuring (never as a JSON tree here).
    let shapes: [(&str, Make); 4] = [
        ("tiny", |ns, n| flow(ns, n, "0", None)),
        ("maps", |ns, n| flow(ns, n, r#"{"a":0}"#, None)),
        ("lists", |ns, n| flow(ns, n, "[0]", None)),
        ("deep", |ns, n| deep(ns, n, 2000)),
    ];
    let bodies: Vec<(String, Vec<u8>)> = (0..10)
        .map(|i| {
            let (shape, make) = shapes[i % shapes.len()];
            let name = format!("{shape}-{i}");
            let body = make(&ns, &name);
            (name, body)
        })
        .collect();
    for (name, body) in &bodies {
        assert!(body.len() <= BODY, "{name}: {} bytes", body.len());
        assert!(
            body.len() > BODY - 1000 || name.starts_with("deep"),
            "{name}"
        );
    }
    // Warm up (the first answers allocate what later ones reuse), then measure.
    let _measuring = MEASURING.lock().await;
    wait_validating(&client, &ns).await;
    let before = rss();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_peak(stop.clone());
    let t0 = Instant::now();
    let answers = futures::future::join_all(bodies.into_iter().map(|(name, body)| {
        let (client, ns) = (client.clone(), ns.clone());
        async move { (name, create_raw(&client, &ns, body).await) }
    }))
    .await;
    stop.store(true, Ordering::SeqCst);
    let peak = sampler.join().unwrap();
    let growth = peak.saturating_sub(before);
    eprintln!(
        "10 concurrent ~3 MiB reviews answered in {:?}; RSS before {} MiB, peak {} MiB (+{} MiB)",
        t0.elapsed(),
        before >> 20,
        peak >> 20,
        growth >> 20
    );
    for (name, answer) in &answers {
        let err = match answer {
            Ok(created) => panic!(
                "{name} was admitted: {}",
                &created[..200.min(created.len())]
            ),
            Err(e) => e.to_string(),
        };
        eprintln!("{name}: {}", &err[..300.min(err.len())]);
        // A denial by the webhook naming why, not a failed call (a 500, a timeout).
        assert!(
            err.contains("denied the request") && err.contains("decode budget"),
            "{name}: {err}"
        );
        assert!(!err.contains("failed calling webhook"), "{name}: {err}");
        // ...naming where: the path of the value past the budget.
        assert!(
            err.contains("request.object.spec.steps[0].forEach["),
            "{name}: {err}"
        );
    }
    assert!(
        growth < 128 << 20,
        "the webhook's process grew by {} MiB for 10 reviews of 3 MiB",
        growth >> 20
    );

    // The heaviest reviews the scan lets through (28 k one-key objects: ~22 MiB estimated each,
    // just under the per-review limit), 10 at once: they are decoded and compiled in turn
    // within the webhook's shared decode budget, and refused by the compiler.
    let heavy: Vec<Vec<u8>> = (0..10)
        .map(|i| flow(&ns, &format!("heavy-{i}"), r#"{"a":0}"#, Some(28_000)))
        .collect();
    let before = rss();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_peak(stop.clone());
    let t0 = Instant::now();
    let answers = futures::future::join_all(heavy.into_iter().map(|body| {
        let (client, ns) = (client.clone(), ns.clone());
        async move { create_raw(&client, &ns, body).await }
    }))
    .await;
    stop.store(true, Ordering::SeqCst);
    let peak = sampler.join().unwrap();
    let growth = peak.saturating_sub(before);
    eprintln!(
        "10 concurrent reviews just within the decode budget answered in {:?}; RSS before {} \
         MiB, peak {} MiB (+{} MiB)",
        t0.elapsed(),
        before >> 20,
        peak >> 20,
        growth >> 20
    );
    for answer in &answers {
        let err = answer
            .as_ref()
            .expect_err("a heavy flow was admitted")
            .to_string();
        // Decoded and compiled (not refused by the scan): the compiler names the long list.
        assert!(
            err.contains("denied the request") && err.contains("at most 1000 items"),
            "{err}"
        );
        assert!(!err.contains("failed calling webhook"), "{err}");
    }
    assert!(
        growth < 256 << 20,
        "the webhook's process grew by {} MiB for 10 reviews within the decode budget",
        growth >> 20
    );

    // A valid flow is still admitted.
    let valid = serde_json::to_vec(&json!({"apiVersion": "ops.example.com/v1alpha1",
        "kind": "PseudoFlow", "metadata": {"name": "valid", "namespace": ns},
        "spec": {"steps": [{"type": "loop", "forEach": [1, 2, 3],
            "steps": [{"type": "log", "message": "item"}]}]}}))
    .unwrap();
    let created = create_raw(&client, &ns, valid).await;
    assert!(created.is_ok(), "the valid flow was refused: {created:?}");
    remove_webhooks(&client, &name).await;
}
