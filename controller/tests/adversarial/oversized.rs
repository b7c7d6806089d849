//! Attacks on what the controller holds of what others write (issue #42 item 3): a tenant who
//! may create flows, and one who may create objects of a bound kind, write 100 of each of
//! ~1.2 MB; then 4 bound flows on the kind are created, each reading every object at once. Before, the flows' watch read them by pages of 500 and its store kept every spec
//! (+242 MiB held), and the objects were read whole, a page of 100 at a time, before each was
//! refused as too large (+703 MiB under 4 bound flows). Now the controller's peak stays within
//! 128 MiB of idle, each oversized flow fails naming the limit and `spec`, each oversized
//! object is named in its bound flow's status with the limit, and an ordinary flow still runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use crate::admission_memory::{create_raw, rss, sample_peak, wait_validating, MEASURING};
use crate::common::admission::start_webhooks;
use crate::common::approval::remove_webhooks;
use crate::common::bound::*;
use crate::common::{apply, create_flow, flows, prepare, wait_done, wait_status};
use pseudoflow_controller::approval::Key;
use pseudoflow_crd::bind::BOUND_TO_LABEL;

/// How many of each: flows and objects.
const COUNT: usize = 100;

/// The payload of each: ~1.2 MB, under etcd's 1.5 MiB per object.
const PAYLOAD: usize = 1_200_000;

/// The bound flows besides `widgets` (which writes the objects' status).
const ALSO_BOUND: [&str; 3] = ["also-1", "also-2", "also-3"];

/// A bound flow on widgets that writes nothing back to them.
fn also_bound() -> serde_json::Value {
    json!({
        "serviceAccountName": "flow",
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "record": "Child",
            "status": {"phaseField": "", "conditions": false}},
        "steps": [{"type": "log", "message": "${object.metadata.name}"}]
    })
}

/// Gives freed memory back to the system, so that RSS measures what is held, not what the
/// allocator keeps of what the test itself built.
fn trim() {
    // SAFETY: malloc_trim only releases free memory of glibc's heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_flows_and_a_hundred_objects_of_1_2_mb_cost_under_128_mib_and_are_refused_by_name(
) {
    let (client, ns) = setup("oversized", all_verbs()).await;
    create_widget(&client, &ns, "ok", json!({"version": "one"})).await;
    let _measuring = MEASURING.lock().await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    trim();
    let idle = rss();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_peak(stop.clone());
    let t0 = Instant::now();

    // One at a time (each body built, sent and dropped), so the test's own buffers stay small.
    let blob = "x".repeat(PAYLOAD);
    for i in 0..COUNT {
        // Labelled as children of the bound flow `widgets`: its lists of children read them too.
        let flow = json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": format!("big-{i}"), "namespace": ns,
                "labels": {BOUND_TO_LABEL: "widgets"}},
            "spec": {"suspend": true, "steps": [{"type": "log", "message": blob}]}});
        apply(&client, flow).await;
        create_widget(
            &client,
            &ns,
            &format!("big-{i}"),
            json!({"version": "one", "blob": blob}),
        )
        .await;
    }
    drop(blob);
    trim();
    let created = t0.elapsed();
    // Then four bound flows on the kind, each reading every object at once in its first pass
    // (as at the filing).
    create_flow(&client, &ns, "widgets", widget_flow(json!({}))).await;
    for flow in ALSO_BOUND {
        create_flow(&client, &ns, flow, also_bound()).await;
    }
    // Every object named as refused by each bound flow.
    let bound = wait_status(
        &client,
        &ns,
        "widgets",
        180,
        "every big object refused",
        |s| s["bound"]["failed"] == COUNT,
    )
    .await;
    for flow in ALSO_BOUND {
        wait_status(&client, &ns, flow, 180, "every big object refused", |s| {
            s["bound"]["failed"] == COUNT
        })
        .await;
    }
    wait_widget(&client, &ns, "ok", "Running").await;
    // Held for a while: the watches' stores, not only their pages.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    trim();
    let held = rss();
    stop.store(true, Ordering::SeqCst);
    let peak = sampler.join().unwrap();
    eprintln!(
        "{COUNT} flows and {COUNT} objects of {PAYLOAD} bytes: created in {created:?}, reported \
         in {:?}; RSS idle {} MiB, peak {} MiB (+{} MiB), held {} MiB (+{} MiB)",
        t0.elapsed(),
        idle >> 20,
        peak >> 20,
        peak.saturating_sub(idle) >> 20,
        held >> 20,
        held.saturating_sub(idle) >> 20,
    );

    let message = bound["bound"]["failures"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("262144") && message.contains("spec"),
        "the object's refusal names the limit and the field: {message}"
    );
    let last = format!("big-{}", COUNT - 1);
    let big = wait_done(&client, &ns, &last, 60).await;
    assert_eq!(big["phase"], "Failed", "{big:#}");
    let said = big["message"].as_str().unwrap_or_default();
    assert!(
        said.contains("spec") && said.contains("524288"),
        "the flow's refusal names the limit and the path: {big:#}"
    );
    // Every flow reported, not only the last (read one at a time).
    for i in 0..COUNT {
        let f = flows(&client, &ns).get(&format!("big-{i}")).await.unwrap();
        assert_eq!(f.data["status"]["phase"], "Failed", "big-{i}");
    }
    assert!(
        peak.saturating_sub(idle) < 128 << 20,
        "the controller's peak grew by {} MiB over idle",
        peak.saturating_sub(idle) >> 20
    );

    // The controller still serves: an ordinary flow runs, and the served object is still served.
    create_flow(
        &client,
        &ns,
        "ordinary",
        json!({"serviceAccountName": "flow", "steps": [{"type": "log", "message": "hello"}]}),
    )
    .await;
    let ok = wait_done(&client, &ns, "ordinary", 60).await;
    assert_eq!(ok["phase"], "Succeeded", "{ok:#}");
    assert_eq!(
        widget_status(&client, &ns, "ok").await["phase"],
        "Running",
        "the ordinary object is still served"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_refuses_a_flow_larger_than_the_controller_reads_naming_the_limit() {
    let (client, ns) = prepare("oversized-webhook", json!([]), json!([])).await;
    let name = start_webhooks(&client, &ns, &Key::random()).await;
    wait_validating(&client, &ns).await;
    let body = |name: &str, n: usize| {
        serde_json::to_vec(&json!({"apiVersion": "ops.example.com/v1alpha1",
            "kind": "PseudoFlow", "metadata": {"name": name, "namespace": ns},
            "spec": {"steps": [{"type": "log", "message": "x".repeat(n)}]}}))
        .unwrap()
    };
    let err = create_raw(&client, &ns, body("big", 600_000))
        .await
        .expect_err("a 600 kB flow was admitted")
        .to_string();
    assert!(
        err.contains("denied the request")
            && err.contains("spec: the flow's spec takes")
            && err.contains("more than the 524288 bytes"),
        "{err}"
    );
    let fits = create_raw(&client, &ns, body("fits", 400_000)).await;
    assert!(fits.is_ok(), "a 400 kB flow was refused: {fits:?}");
    remove_webhooks(&client, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_flow_over_the_limit_fails_naming_it_and_its_bound_flow_says_why() {
    let (client, ns) = setup("oversized-child", all_verbs()).await;
    // 300 kB of steps plus an object of 250 kB: each within its limit, their child is not.
    let flow = json!({
        "serviceAccountName": "flow",
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "record": "Child",
            "status": {"phaseField": "", "conditions": false}},
        "steps": [{"type": "log", "message": "y".repeat(300_000)}]
    });
    create_flow(&client, &ns, "big-steps", flow).await;
    create_widget(&client, &ns, "w", json!({"blob": "x".repeat(250_000)})).await;
    let status = wait_status(&client, &ns, "big-steps", 60, "the object refused", |s| {
        s["bound"]["failed"] == 1
    })
    .await;
    let message = status["bound"]["failures"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("spec: ") && message.contains("more than the 524288 bytes"),
        "{status:#}"
    );
    let child = pseudoflow_controller::bind::child::child_name("big-steps", &ns, "w");
    let child = wait_done(&client, &ns, &child, 60).await;
    assert_eq!(child["phase"], "Failed", "{child:#}");
    assert!(
        child["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("spec: the flow's spec takes")),
        "{child:#}"
    );
}
