//! `parallel` end to end on testenv: it waits for every branch, fails when a branch fails while
//! waiting for all, and without `waitForAll` goes on after the first success.

use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use serde_json::json;

use crate::common::api::eventually;
use crate::common::shorthand::{cm, cm_rules, exec, flow_jobs, mark, message, nodes_of};
use crate::common::{create_flow, created, job_node, setup, step, wait_done};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_waits_for_every_branch_before_going_on() {
    let (client, ns, ctl) = setup("par-all", cm_rules(), json!([])).await;
    create_flow(
        &client,
        &ns,
        "both",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "parallel", "waitForAll": true, "steps": [
                [mark(&ns, "left")],
                [exec("sleep 2"), mark(&ns, "right")]
            ]},
            mark(&ns, "joined")
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "both", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    for name in ["left", "right", "joined"] {
        assert!(cm(&client, &ns, name).await.is_some(), "{name}");
    }
    let jobs = flow_jobs(&client, &ns, "both").await;
    // One Job per branch (the right branch's two steps are fused) and one after the join.
    let mut nodes = nodes_of(&jobs);
    nodes.sort();
    assert_eq!(nodes, ["s0-b0-s0", "s0-b1-s0", "s1"]);
    let joined = jobs.iter().find(|j| job_node(j) == "s1").unwrap();
    // Each branch ends by creating its marker; the step after the join may start once the
    // branch's last step is done — recorded by its (fused) Job, maybe before that Job ends.
    for marker in ["left", "right"] {
        let made = cm(&client, &ns, marker).await.unwrap();
        let made = made.metadata.creation_timestamp.unwrap().0.as_second();
        assert!(
            created(joined) >= made,
            "the step after the join started only after branch {marker} finished"
        );
    }
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_waiting_for_all_fails_when_a_branch_fails() {
    let (client, ns, ctl) = setup("par-fail", cm_rules(), json!([])).await;
    // waitForAll is true by default.
    create_flow(
        &client,
        &ns,
        "one-bad",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "parallel", "steps": [
                [exec("exit 4")],
                [exec("sleep 60"), mark(&ns, "too-late")]
            ]},
            mark(&ns, "never")
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "one-bad", 45).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let msg = message(&status);
    assert!(
        msg.starts_with("spec.steps[0]")
            && msg.contains("spec.steps[0].steps[0][0]: command failed with exit code 4"),
        "{msg}"
    );
    let slow = step(&status, "spec.steps[0].steps[1][0]");
    assert!(
        slow["startedAt"].is_string(),
        "both branches started: {status:#}"
    );
    assert_eq!(slow["phase"], "Aborted", "{status:#}");
    let nodes = nodes_of(&flow_jobs(&client, &ns, "one-bad").await);
    assert!(!nodes.contains(&"s1".to_string()), "{nodes:?}");
    assert!(cm(&client, &ns, "never").await.is_none());
    assert!(cm(&client, &ns, "too-late").await.is_none());
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_without_wait_for_all_goes_on_after_the_first_success() {
    let (client, ns, ctl) = setup("par-any", cm_rules(), json!([])).await;
    create_flow(&client, &ns, "first-wins", json!({"serviceAccountName": "flow", "steps": [
        {"type": "parallel", "waitForAll": false, "steps": [
            [exec("exit 1")],
            [mark(&ns, "fast")],
            [{"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "never-created", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 300}]
        ]},
        mark(&ns, "after")
    ]}))
    .await;
    let status = wait_done(&client, &ns, "first-wins", 90).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert!(cm(&client, &ns, "after").await.is_some());
    let waiting = step(&status, "spec.steps[0].steps[2][0]");
    assert_eq!(waiting["phase"], "Aborted", "{status:#}");
    assert_eq!(
        step(&status, "spec.steps[0].steps[0][0]")["phase"],
        "Failed",
        "a failed branch is recorded but does not fail the parallel"
    );
    let job_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let waiter = flow_jobs(&client, &ns, "first-wins")
        .await
        .into_iter()
        .find(|j| job_node(j) == "s0-b2-s0");
    if let Some(w) = waiter {
        let name = w.metadata.name.unwrap();
        eventually(30, "the aborted branch's Job is deleted", || async {
            job_api
                .get_opt(&name)
                .await
                .unwrap()
                .is_none_or(|j| j.metadata.deletion_timestamp.is_some())
        })
        .await;
    }
    ctl.abort();
}
