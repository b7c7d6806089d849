//! `suspend` and `resume`: `spec.suspend` set and cleared, and no new run while suspended.

use std::time::Duration;

use kube::Client;
use pseudoflow_test_support::{create_flow, flows, wait_done};
use serde_json::json;

use crate::support::{namespace, pf, start_controller};

/// Flow `held`: one `log` step.
async fn create_held(client: &Client, ns: &str) {
    create_flow(
        client,
        ns,
        "held",
        json!({"serviceAccountName": "flow", "steps": [{"type": "log", "message": "hi"}]}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_and_resume_set_spec_suspend() {
    let (client, ns) = namespace("pf-suspend").await;
    create_held(&client, &ns).await;
    let suspend = |client: Client, ns: String| async move {
        flows(&client, &ns).get("held").await.unwrap().data["spec"]["suspend"].as_bool()
    };
    let o = pf(&["suspend", "held", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("held suspended"), "{}", o.stdout);
    assert_eq!(suspend(client.clone(), ns.clone()).await, Some(true));
    let o = pf(&["resume", "held", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_ne!(suspend(client.clone(), ns.clone()).await, Some(true));
    let o = pf(&["suspend", "absent", "-n", &ns]).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("absent"), "{}", o.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_flow_starts_no_new_run_until_resumed() {
    let (client, ns) = namespace("pf-hold").await;
    let ctl = start_controller(&client, &ns);
    create_held(&client, &ns).await;
    let first = wait_done(&client, &ns, "held", 60).await;
    assert_eq!(first["phase"], "Succeeded", "{first:#}");
    let run = first["run"]["id"].clone();

    let o = pf(&["suspend", "held", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    // A re-run request while suspended starts nothing.
    pseudoflow_test_support::request_run(&client, &ns, "held", "again").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = flows(&client, &ns).get("held").await.unwrap().data["status"].clone();
    assert_eq!(st["run"]["id"], run, "no new run while suspended: {st:#}");

    let o = pf(&["resume", "held", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let st = pseudoflow_test_support::wait_status(&client, &ns, "held", 60, "a new run", |st| {
        st["run"]["id"] != run && st["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(st["run"]["trigger"], "again", "{st:#}");
    ctl.abort();
}
