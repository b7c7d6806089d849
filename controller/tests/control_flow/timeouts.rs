//! Step timeouts end to end on testenv: a step past its `timeoutSeconds` fails naming the step
//! and the timeout, and so does a `sleep`.

use serde_json::json;

use crate::common::api::unix;
use crate::common::shorthand::{cm, cm_rules, exec, mark, message};
use crate::common::{create_flow, setup, step, wait_done};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_past_its_timeout_fails_naming_the_step_and_the_timeout() {
    let (client, ns, ctl) = setup("step-timeout", cm_rules(), json!([])).await;
    let mut slow = exec("sleep 60");
    slow["timeoutSeconds"] = json!(2);
    create_flow(
        &client,
        &ns,
        "slow",
        json!({"serviceAccountName": "flow", "steps": [mark(&ns, "first"), slow, mark(&ns, "never")]}),
    )
    .await;
    let status = wait_done(&client, &ns, "slow", 45).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(
        status["reason"], "StepFailed",
        "a step timeout is not the run timeout"
    );
    assert_eq!(message(&status), "spec.steps[1]: timed out after 2s");
    assert_eq!(step(&status, "spec.steps[1]")["phase"], "Failed");
    assert!(cm(&client, &ns, "never").await.is_none());
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_step_past_its_timeout_fails() {
    let (client, ns, ctl) = setup("sleep-timeout", json!([]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "oversleeps",
        json!({"steps": [{"type": "sleep", "seconds": 600, "timeoutSeconds": 2}, {"type": "log", "message": "never"}]}),
    )
    .await;
    let status = wait_done(&client, &ns, "oversleeps", 30).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(message(&status), "spec.steps[0]: timed out after 2s");
    let sleep = step(&status, "spec.steps[0]");
    let slept = unix(&sleep["finishedAt"]) - unix(&sleep["startedAt"]);
    assert!(
        (2..30).contains(&slept),
        "ended by the timeout, not the sleep: {slept}s"
    );
    ctl.abort();
}
