//! Attacks on decoding and on the controller's loop: one flow — too deeply nested to decode, with
//! a run state too large to store, including itself, or making a reconcile panic — must fail
//! alone while the controller keeps serving every other flow; a deleted flow leaves no metrics.

use std::sync::Arc;
use std::time::Duration;

use kube::api::DeleteParams;
use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use serde_json::{json, Value};

use crate::common::{
    apply, create_flow, delete_flow, flow_events, flows, jobs, prepare, start_controller,
    start_controller_with, wait_done,
};

const URL: &str = "/apis/ops.example.com/v1alpha1/namespaces";

async fn setup(prefix: &str) -> (Client, String) {
    prepare(
        prefix,
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}]),
        json!([]),
    )
    .await
}

/// A `loop` whose `forEach` is a list nested `depth` deep.
fn deep_spec(depth: usize) -> Value {
    let mut items = json!(["leaf"]);
    for _ in 0..depth {
        items = json!([items]);
    }
    json!({"steps": [{"type": "loop", "forEach": items, "steps": [{"type": "log", "message": "item"}]}]})
}

/// Creates a flow without decoding the answer (a client decoding it as a `Value` would itself hit
/// serde_json's recursion limit).
async fn create_raw(client: &Client, ns: &str, name: &str, spec: Value) {
    let body = json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "metadata": {"name": name, "namespace": ns}, "spec": spec});
    let req = http::Request::post(format!("{URL}/{ns}/pseudoflows"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    client.request_text(req).await.unwrap();
}

/// The status of a flow however deep its spec: only `status` is decoded, the rest skipped.
async fn raw_status(client: &Client, ns: &str, name: &str) -> Value {
    #[derive(serde::Deserialize)]
    struct StatusOnly {
        #[serde(default)]
        status: Option<Box<serde_json::value::RawValue>>,
    }
    let req = http::Request::get(format!("{URL}/{ns}/pseudoflows/{name}"))
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(req).await.unwrap();
    let only: StatusOnly = serde_json::from_str(&text).unwrap();
    only.status
        .map(|s| serde_json::from_str(s.get()).unwrap())
        .unwrap_or(Value::Null)
}

async fn wait_raw_status(client: &Client, ns: &str, name: &str, secs: u64) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let st = raw_status(client, ns, name).await;
        if st["phase"] == "Failed" || st["phase"] == "Succeeded" {
            return st;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "flow {name}: no final phase after {secs}s; last status: {st:#}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_nested_too_deep_fails_alone_and_a_relist_still_serves_the_others() {
    let (client, ns) = setup("deep").await;
    let ctl = start_controller(&client, &ns);
    let log = json!({"steps": [{"type": "log", "message": "ran"}]});
    create_flow(&client, &ns, "a", log.clone()).await;
    create_raw(&client, &ns, "b", deep_spec(200)).await;
    let a = wait_done(&client, &ns, "a", 60).await;
    assert_eq!(a["phase"], "Succeeded", "{a:#}");
    let b = wait_raw_status(&client, &ns, "b", 60).await;
    assert_eq!(b["phase"], "Failed", "{b:#}");
    assert_eq!(b["reason"], "InvalidSpec", "{b:#}");
    let msg = b["message"].as_str().unwrap();
    eprintln!("{msg}");
    assert!(
        msg.contains("spec.steps[0].forEach"),
        "names the path: {msg}"
    );
    assert!(msg.contains("64"), "names the limit: {msg}");

    // A new controller lists every flow of the namespace at once, the deep one among them.
    ctl.abort();
    let _ = ctl.await;
    create_flow(&client, &ns, "c", log).await;
    let ctl = start_controller(&client, &ns);
    let c = wait_done(&client, &ns, "c", 60).await;
    assert_eq!(c["phase"], "Succeeded", "{c:#}");
    let a_after = flows(&client, &ns).get("a").await.unwrap().data["status"].clone();
    assert_eq!(a_after, a, "A's status is left as it was");
    assert_eq!(raw_status(&client, &ns, "b").await, b, "B is not rewritten");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_state_growing_past_the_limit_ends_the_run_failed_once() {
    let (client, ns) = setup("bigstate").await;
    let ctl = start_controller(&client, &ns);
    // Controller-local steps only: 600 kB + 500 kB of variables in one reconcile, then a sleep
    // that would keep the run going.
    let grow = |var: &str, items: Value, chunk: usize| {
        json!({"type": "loop", "forEach": items, "steps": [
            {"type": "eval", "expression": format!("${{{var}}} ~ (\"x\" * {chunk})"), "var": var}
        ]})
    };
    create_flow(
        &client,
        &ns,
        "big",
        json!({
            "vars": {"acc": "", "other": ""},
            "steps": [
                {"type": "log", "message": "growing"},
                grow("acc", json!([1, 2, 3]), 200_000),
                grow("other", json!([1, 2]), 250_000),
                {"type": "sleep", "seconds": 600}
            ]
        }),
    )
    .await;
    let st = wait_done(&client, &ns, "big", 30).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert_eq!(st["reason"], "RunStateTooLarge", "{st:#}");
    let msg = st["message"].as_str().unwrap();
    eprintln!("{msg}");
    assert!(msg.contains("acc"), "names the biggest variable: {msg}");
    assert!(msg.contains("921600"), "names the limit: {msg}");
    // Nothing retries behind the scenes: every Event stays single.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let events = flow_events(&client, &ns, "big").await;
    let reasons: Vec<_> = events
        .iter()
        .map(|e| e.reason.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        reasons.iter().filter(|r| *r == "Log").count(),
        1,
        "{reasons:?}"
    );
    assert_eq!(
        reasons.iter().filter(|r| *r == "RunFailed").count(),
        1,
        "{reasons:?}"
    );
    for e in &events {
        let repeats = e
            .series
            .as_ref()
            .map_or(1, |s| s.count.unwrap_or(1))
            .max(e.count.unwrap_or(1));
        assert_eq!(repeats, 1, "event {:?} repeated: {e:?}", e.reason);
    }
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_map_including_itself_fails_as_a_cycle_with_few_jobs() {
    let (client, ns) = setup("selfinc").await;
    let ctl = start_controller(&client, &ns);
    let inc =
        json!({"type": "include", "source": {"configMapRef": {"name": "self", "key": "steps"}}});
    let body = json!([{"type": "parallel", "steps": [[inc.clone()], [inc.clone()]]}]);
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "self", "namespace": ns},
        "data": {"steps": serde_json::to_string(&body).unwrap()}}),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "selfinc",
        json!({
            "serviceAccountName": "flow",
            "steps": [inc]
        }),
    )
    .await;
    let st = wait_done(&client, &ns, "selfinc", 60).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    let msg = st["message"].as_str().unwrap();
    eprintln!("{msg}");
    assert!(msg.contains("cycle"), "{msg}");
    assert!(msg.contains("spec.steps[0]"), "names the step: {msg}");
    assert!(msg.contains("configMap self"), "names the source: {msg}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let n = jobs(&client, &ns).await.len();
    assert!(n <= 3, "one fetch, then one per branch: {n} Jobs");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_that_panics_a_reconcile_fails_alone() {
    let (client, ns) = setup("panic").await;
    let ctl = start_controller(&client, &ns);
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "there", "namespace": ns}}),
    )
    .await;
    // timeoutSeconds + the Job's grace overflowed a u32 in lowering (a panic in debug builds).
    let huge = json!({"serviceAccountName": "flow", "steps": [{"type": "waitFor",
        "resource": {"kind": "ConfigMap", "name": "there", "namespace": ns},
        "condition": "Exist", "timeoutSeconds": 4294967295u64}]});
    let api = flows(&client, &ns);
    let refused = pseudoflow_testenv::apply::apply_value(
        &client,
        json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "huge", "namespace": ns}, "spec": huge}),
        None,
    )
    .await
    .err();
    if let Some(e) = refused {
        // The API server refuses it already (CRD maxima): nothing reaches the reconcile.
        assert!(format!("{e:#}").contains("timeoutSeconds"), "{e:#}");
    } else {
        // It panics (Failed, InternalError) until lowering saturates; then it simply succeeds.
        let st = wait_done(&client, &ns, "huge", 60).await;
        eprintln!("the flow that made lowering overflow: {st:#}");
        if st["phase"] == "Failed" {
            let msg = st["message"].as_str().unwrap();
            assert_eq!(st["reason"], "InternalError", "{st:#}");
            assert!(msg.contains("internal error"), "{msg}");
            assert!(msg.contains("overflow"), "says what panicked: {msg}");
        }
    }
    create_flow(
        &client,
        &ns,
        "after",
        json!({"steps": [{"type": "log", "message": "still served"}]}),
    )
    .await;
    let st = wait_done(&client, &ns, "after", 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    drop(api);
    ctl.abort();
}

/// Waits up to 10 s until the rendered metrics satisfy `pred`.
async fn wait_metrics(metrics: &Metrics, what: &str, pred: impl Fn(&str) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = metrics.render();
        if pred(&text) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited 10s for {what}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_flow_leaves_no_metrics_series() {
    let (client, ns) = setup("metrics").await;
    let metrics = Arc::new(Metrics::default());
    let ctl = start_controller_with(&client, &ns, metrics.clone());
    // A run that ends (a series of runs_total) and a run in progress (the active gauge).
    create_flow(
        &client,
        &ns,
        "done",
        json!({"steps": [{"type": "log", "message": "x"}]}),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "sleepy",
        json!({"steps": [{"type": "sleep", "seconds": 600}]}),
    )
    .await;
    wait_done(&client, &ns, "done", 60).await;
    wait_metrics(&metrics, "both flows counted", |t| {
        t.contains("pseudoflow_active_flows 1") && t.contains(&format!("{ns}/done"))
    })
    .await;
    for name in ["sleepy", "done"] {
        delete_flow(&client, &ns, name, &DeleteParams::default(), 30).await;
    }
    wait_metrics(&metrics, "no series of the deleted flows", |t| {
        t.contains("pseudoflow_active_flows 0") && !t.contains(&ns)
    })
    .await;
    ctl.abort();
}
