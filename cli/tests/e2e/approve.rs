//! `approve` and `reject`: the annotation set each time, for the run the step waits in only.

use kube::Client;
use pseudoflow_test_support::{create_flow, flows};
use serde_json::json;

use crate::support::{namespace, pf, start_controller};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_and_reject_set_the_annotation_again_each_time() {
    let (client, ns) = namespace("pf-approve").await;
    let ctl = start_controller(&client, &ns);
    create_flow(
        &client,
        &ns,
        "gated",
        json!({"serviceAccountName": "flow", "steps": [{"type": "approval", "name": "gate"}]}),
    )
    .await;
    // No webhook here: no decision is accepted, so the gate keeps waiting.
    let run = wait_gate_waiting(&client, &ns, "gated").await;
    let annotation = |client: Client, ns: String, key: &'static str| async move {
        flows(&client, &ns)
            .get("gated")
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
            .get(key)
            .cloned()
    };
    for _ in 0..2 {
        let o = pf(&["approve", "gated", "gate", "-n", &ns]).await;
        assert_eq!(o.code, 0, "{}", o.stderr);
        let said = format!("gated step \"gate\" of run {run} approved");
        assert!(o.stdout.contains(&said), "{}", o.stdout);
        let approve = annotation(client.clone(), ns.clone(), "ops.example.com/approve").await;
        assert_eq!(approve.as_deref(), Some("gate"));
    }
    let o = pf(&["reject", "gated", "gate", "-n", &ns, "--run", &run]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let reject = annotation(client.clone(), ns.clone(), "ops.example.com/reject").await;
    assert_eq!(reject.as_deref(), Some("gate"));
    let o = pf(&["approve", "absent", "gate", "-n", &ns]).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("absent"), "{}", o.stderr);
    ctl.abort();
}

/// Waits until step `gate` of flow `name` waits for approval; returns the run it waits in.
async fn wait_gate_waiting(client: &Client, ns: &str, name: &str) -> String {
    let st = pseudoflow_test_support::wait_status(client, ns, name, 60, "the gate waiting", |s| {
        s["reason"] == "WaitingForApproval"
    })
    .await;
    st["run"]["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_names_the_run_and_fails_for_another() {
    let (client, ns) = namespace("pf-approve-run").await;
    let ctl = start_controller(&client, &ns);
    create_flow(
        &client,
        &ns,
        "gated",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "log", "message": "before"},
            {"type": "approval", "name": "gate"},
        ]}),
    )
    .await;
    let run = wait_gate_waiting(&client, &ns, "gated").await;
    let approve_annotation = |client: Client, ns: String| async move {
        let f = flows(&client, &ns).get("gated").await.unwrap();
        f.metadata
            .annotations
            .unwrap_or_default()
            .get("ops.example.com/approve")
            .cloned()
    };
    // A run that is not the one waiting: refused, nothing set.
    let o = pf(&["approve", "gated", "gate", "-n", &ns, "--run", "r-older"]).await;
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr.contains("run r-older is not the run")
            && o.stderr.contains(&format!("waits in run {run}")),
        "{}",
        o.stderr
    );
    assert_eq!(approve_annotation(client.clone(), ns.clone()).await, None);
    // A step that is not waiting (another name): refused, naming the run.
    let o = pf(&["approve", "gated", "other", "-n", &ns]).await;
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr
            .contains(&format!("is not waiting for approval in run {run}")),
        "{}",
        o.stderr
    );
    assert_eq!(approve_annotation(client.clone(), ns.clone()).await, None);
    // The run it waits in: set, and said.
    let o = pf(&["approve", "gated", "gate", "-n", &ns, "--run", &run]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains(&format!("of run {run} approved")),
        "{}",
        o.stdout
    );
    assert_eq!(
        approve_annotation(client.clone(), ns.clone())
            .await
            .as_deref(),
        Some("gate")
    );
    ctl.abort();
}
