//! `continueOnError` and `onError` end to end on testenv: a failure is recorded and the flow goes
//! on, a handler runs and the flow continues, and a failing handler fails the flow.

use serde_json::json;

use crate::common::shorthand::{cm, cm_rules, exec, flow_jobs, mark, message, nodes_of};
use crate::common::{create_flow, flow_events, setup, step, wait_done};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_on_error_records_the_failure_and_goes_on() {
    let (client, ns, ctl) = setup("coe", cm_rules(), json!([])).await;
    let mut failing = exec("echo broken >&2; exit 5");
    failing["continueOnError"] = json!(true);
    create_flow(
        &client,
        &ns,
        "tolerant",
        json!({"serviceAccountName": "flow", "steps": [failing, mark(&ns, "after")]}),
    )
    .await;
    let status = wait_done(&client, &ns, "tolerant", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let failed = step(&status, "spec.steps[0]");
    assert_eq!(failed["phase"], "Failed", "{status:#}");
    let msg = failed["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("exit code 5") && msg.contains("broken"),
        "{msg}"
    );
    assert!(cm(&client, &ns, "after").await.is_some());
    let warnings: Vec<String> = flow_events(&client, &ns, "tolerant")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("StepFailed"))
        .filter_map(|e| e.message)
        .collect();
    assert!(
        warnings.iter().any(|m| m.starts_with("spec.steps[0]")),
        "{warnings:?}"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_error_runs_its_handler_and_the_flow_continues() {
    let (client, ns, ctl) = setup("onerror", cm_rules(), json!([])).await;
    create_flow(
        &client,
        &ns,
        "handled",
        json!({"serviceAccountName": "flow", "steps": [
            exec("exit 1"),
            {"type": "onError", "steps": [mark(&ns, "handler-ran")]},
            mark(&ns, "after")
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "handled", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(step(&status, "spec.steps[0]")["phase"], "Failed");
    assert_eq!(
        step(&status, "spec.steps[1].steps[0]")["phase"],
        "Succeeded"
    );
    assert!(cm(&client, &ns, "handler-ran").await.is_some());
    assert!(cm(&client, &ns, "after").await.is_some());
    assert_eq!(
        nodes_of(&flow_jobs(&client, &ns, "handled").await),
        ["s0", "s1-s0", "s2"]
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_on_error_handler_fails_the_flow() {
    let (client, ns, ctl) = setup("onerror-fail", cm_rules(), json!([])).await;
    create_flow(
        &client,
        &ns,
        "unhandled",
        json!({"serviceAccountName": "flow", "steps": [
            exec("exit 1"),
            {"type": "onError", "steps": [exec("exit 2")]},
            mark(&ns, "after")
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "unhandled", 120).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let msg = message(&status);
    assert!(
        msg.starts_with("spec.steps[1].steps[0]") && msg.contains("exit code 2"),
        "{msg}"
    );
    assert!(cm(&client, &ns, "after").await.is_none());
    assert_eq!(
        nodes_of(&flow_jobs(&client, &ns, "unhandled").await),
        ["s0", "s1-s0"]
    );
    ctl.abort();
}
