//! The controller-local steps (`eval`, `log`, `sleep`) end to end on testenv: no pod, the
//! rendered message published, an Event per log step and run end, a pause without a Job.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::common::api::unix;
use crate::common::shorthand::run_id_now;
use crate::common::{
    create_flow, event_time, flow_events, flows, jobs, request_run, setup, step, wait_done,
    wait_until, Shown,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_and_log_publish_the_rendered_message_without_a_pod() {
    let (client, ns, ctl) = setup("log", json!([]), json!([])).await;
    create_flow(&client, &ns, "shout", json!({"vars": {"csv": "a,b,c"}, "steps": [
        {"type": "eval", "expression": "${csv}.split(',') | map('upper') | join(' ')", "var": "shouted"},
        {"type": "log", "message": "shouted: ${shouted}"}
    ]}))
    .await;
    let status = wait_done(&client, &ns, "shout", 60).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let logs: Vec<_> = flow_events(&client, &ns, "shout")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Log"))
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0].message.as_deref(), Some("shouted: A B C"));
    assert_eq!(logs[0].type_.as_deref(), Some("Normal"));
    let about = &logs[0].involved_object;
    assert_eq!(
        (about.kind.as_deref(), about.name.as_deref()),
        (Some("PseudoFlow"), Some("shout"))
    );
    assert!(jobs(&client, &ns).await.is_empty(), "no Job");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(pods.items.is_empty(), "no pod");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_log_step_and_every_run_end_is_an_event_of_its_own() {
    let (client, ns, ctl) = setup("events", json!([]), json!([])).await;
    let notes = |reason: &'static str| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            flow_events(&client, &ns, "chatty")
                .await
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .filter_map(|e| e.message)
                .collect::<Vec<_>>()
        }
    };
    create_flow(
        &client,
        &ns,
        "chatty",
        json!({"steps": [{"type": "log", "message": "first"}, {"type": "log", "message": "second"}]}),
    )
    .await;
    let first = wait_done(&client, &ns, "chatty", 60).await;
    assert_eq!(first["phase"], "Succeeded", "{first:#}");
    assert_eq!(notes("Log").await, ["first", "second"]);
    request_run(&client, &ns, "chatty", "again").await;
    let second_id = run_id_now(&client, &ns, "chatty", "again").await;
    let shown = [Shown::flow(&client, &ns, "chatty")];
    wait_until(&client, "the second run succeeded", 60, &shown, || async {
        let f = flows(&client, &ns).get("chatty").await.unwrap();
        let st = &f.data["status"];
        st["run"]["id"] == json!(second_id) && st["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(
        notes("RunSucceeded").await,
        [
            format!("run {} succeeded", first["run"]["id"].as_str().unwrap()),
            format!("run {second_id} succeeded")
        ]
    );
    ctl.abort();
}

/// The Events of steps done in one reconcile read in step order by their time, as `kubectl
/// events` (or `kubectl get events --sort-by=.eventTime`) orders them: each Event's time is
/// taken when its step is told, in order, and no two share a time (a tie would leave the order
/// to the Events' names, which are random). Twelve `log` steps run in one reconcile, whose
/// Events are sent concurrently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_of_one_reconcile_read_in_step_order_by_their_time() {
    let (client, ns, ctl) = setup("ev-order", json!([]), json!([])).await;
    let said: Vec<String> = (1..=12).map(|i| format!("line {i:02}")).collect();
    let steps: Vec<_> = said
        .iter()
        .map(|m| json!({"type": "log", "message": m}))
        .collect();
    create_flow(&client, &ns, "many", json!({"steps": steps})).await;
    let status = wait_done(&client, &ns, "many", 60).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let logs: Vec<_> = flow_events(&client, &ns, "many")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Log"))
        .collect();
    let told: Vec<_> = logs.iter().filter_map(|e| e.message.clone()).collect();
    assert_eq!(told, said, "{logs:#?}");
    let times: Vec<_> = logs.iter().map(event_time).collect();
    assert!(
        times.windows(2).all(|w| w[0] < w[1]),
        "every Event at a time of its own: {times:?}"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleep_pauses_the_flow_without_a_job() {
    let (client, ns, ctl) = setup("sleep", json!([]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "nap",
        json!({"steps": [
            {"type": "log", "message": "before"},
            {"type": "sleep", "seconds": 3},
            {"type": "log", "message": "after"}
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "nap", 60).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let sleep = step(&status, "spec.steps[1]");
    let (start, end) = (unix(&sleep["startedAt"]), unix(&sleep["finishedAt"]));
    assert!(end - start >= 3, "slept {}s: {status:#}", end - start);
    assert!(
        unix(&status["run"]["finishedAt"]) - start >= 3,
        "{status:#}"
    );
    assert!(jobs(&client, &ns).await.is_empty(), "no Job");
    ctl.abort();
}
