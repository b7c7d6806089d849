//! `retry` end to end on testenv: its steps run again after a doubling backoff until they
//! succeed, and the flow fails once its attempts are spent.

use serde_json::json;

use crate::common::shorthand::{cm, cm_rules, exec, flow_jobs, mark, message, nodes_of};
use crate::common::{create_flow, created, setup, step, wait_done, work_ended};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_reruns_its_steps_after_doubling_backoff_until_they_succeed() {
    let (client, ns, ctl) = setup("retry-ok", cm_rules(), json!([])).await;
    // Attempt n (0-based) records itself as ConfigMap attempt-n and succeeds from the third on.
    let flaky = "n=$(kubectl get configmaps -o name | grep -c /attempt-); kubectl create configmap attempt-$n >/dev/null; test $n -ge 2";
    create_flow(
        &client,
        &ns,
        "flaky",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "retry", "attempts": 3, "backoffSeconds": 2, "steps": [exec(flaky)]}
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "flaky", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let body = step(&status, "spec.steps[0].steps[0]");
    assert_eq!(body["phase"], "Succeeded", "{status:#}");
    assert_eq!(body["attempt"], 3, "{status:#}");
    let jobs = flow_jobs(&client, &ns, "flaky").await;
    let attempts: Vec<String> = jobs
        .iter()
        .map(|j| crate::common::annotation(j, "ops.example.com/attempt"))
        .collect();
    assert_eq!(attempts, ["1", "2", "3"], "one Job per attempt, in order");
    assert!(nodes_of(&jobs).iter().all(|n| n == "s0-s0"));
    for n in 0..3 {
        assert!(cm(&client, &ns, &format!("attempt-{n}")).await.is_some());
    }
    // Backoff before attempt 2 is 2 s, before attempt 3 it doubles to 4 s: counted from the end
    // of the attempt's work (its pod), which the controller sees no earlier.
    for (i, backoff) in [(0, 2), (1, 4)] {
        let ended = work_ended(&client, &jobs[i]).await;
        let gap = created(&jobs[i + 1]) - ended.expect("earlier attempts finished");
        assert!(gap >= backoff, "gap {}: {gap}s", i + 1);
    }
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_gives_up_after_its_attempts_and_fails_the_flow() {
    let (client, ns, ctl) = setup("retry-fail", cm_rules(), json!([])).await;
    create_flow(
        &client,
        &ns,
        "hopeless",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "retry", "attempts": 2, "backoffSeconds": 1, "steps": [exec("exit 3")]},
            mark(&ns, "after")
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "hopeless", 120).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(status["reason"], "StepFailed", "{status:#}");
    let msg = message(&status);
    assert!(
        msg.starts_with("spec.steps[0]") && msg.contains("exit code 3"),
        "{msg}"
    );
    let jobs = flow_jobs(&client, &ns, "hopeless").await;
    assert_eq!(
        nodes_of(&jobs),
        ["s0-s0", "s0-s0"],
        "exactly `attempts` Jobs, nothing after"
    );
    assert!(cm(&client, &ns, "after").await.is_none());
    ctl.abort();
}
