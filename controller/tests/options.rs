//! The step options end to end on a real control plane (testenv): retry with doubling backoff,
//! parallel joins, if/when, loops over evaluated lists, continueOnError and onError, the
//! controller-local steps (eval, log, sleep), step timeouts, concurrency policies and metrics.
//! The walker's unit tests (walk/src/tests.rs) cover the same rules on a pure plan;
//! these check what a person sees on the cluster: status, Jobs, created objects and Events.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams};
use kube::Client;
use pseudoflow_compiler::names::run_id;
use pseudoflow_controller::metrics::{self, Metrics};
use serde_json::{json, Value};

mod common;

use common::api::{eventually, unix};
use common::{
    apply, create_flow, created, finished, flow_events, flows, job_node, jobs, prepare,
    request_run, setup, start_controller_with, step, wait_done, wait_status, work_ended,
};

/// What the flows of these tests may do in their namespace: ConfigMaps, read and write.
fn cm_rules() -> Value {
    json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}])
}

/// A step that creates ConfigMap `name` (an apply, so an executor Job).
fn mark(ns: &str, name: &str) -> Value {
    json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}})
}

/// A step that runs `cmd` with `sh -c` in its Job.
fn exec(cmd: &str) -> Value {
    json!({"type": "exec", "cmd": cmd})
}

/// A condition on ConfigMap `switch`'s `data.mode`.
fn mode_is(ns: &str, value: &str) -> Value {
    json!({"resource": {"kind": "ConfigMap", "name": "switch", "namespace": ns}, "jsonPath": "{.data.mode}", "op": "equals", "value": value})
}

async fn cm(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// The Jobs flow `flow` created, oldest first.
async fn flow_jobs(client: &Client, ns: &str, flow: &str) -> Vec<Job> {
    jobs(client, ns)
        .await
        .into_iter()
        .filter(|j| {
            j.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("ops.example.com/flow"))
                .is_some_and(|f| f == flow)
        })
        .collect()
}

fn run_label(j: &Job) -> String {
    j.metadata.labels.as_ref().unwrap()["ops.example.com/run"].clone()
}

fn nodes_of(jobs: &[Job]) -> Vec<String> {
    jobs.iter().map(job_node).collect()
}

fn message(status: &Value) -> &str {
    status["message"].as_str().unwrap_or_default()
}

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
        .map(|j| common::annotation(j, "ops.example.com/attempt"))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_runs_only_the_branch_its_condition_selects() {
    let (client, ns, ctl) = setup("if", cm_rules(), json!([])).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "switch", "namespace": ns}, "data": {"mode": "on"}})).await;
    for (flow, value) in [("yes", "on"), ("no", "off")] {
        create_flow(
            &client,
            &ns,
            flow,
            json!({"serviceAccountName": "flow", "steps": [
                {"type": "if", "condition": mode_is(&ns, value),
                 "then": [mark(&ns, &format!("{flow}-then"))],
                 "else": [mark(&ns, &format!("{flow}-else"))]}
            ]}),
        )
        .await;
    }
    for (flow, ran, skipped) in [("yes", "then", "else"), ("no", "else", "then")] {
        let status = wait_done(&client, &ns, flow, 120).await;
        assert_eq!(status["phase"], "Succeeded", "{flow}: {status:#}");
        assert_eq!(
            nodes_of(&flow_jobs(&client, &ns, flow).await),
            ["s0".to_string(), format!("s0-{ran}-s0")],
            "{flow}: the condition's Job, then only the {ran} branch"
        );
        assert!(cm(&client, &ns, &format!("{flow}-{ran}")).await.is_some());
        assert!(cm(&client, &ns, &format!("{flow}-{skipped}"))
            .await
            .is_none());
        assert_eq!(
            step(&status, &format!("spec.steps[0].{ran}[0]"))["phase"],
            "Succeeded"
        );
        assert_eq!(
            step(&status, &format!("spec.steps[0].{skipped}[0]"))["phase"],
            "Skipped",
            "{flow}: {status:#}"
        );
    }
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_guards_only_the_step_after_it() {
    let (client, ns, ctl) = setup("when", cm_rules(), json!([])).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "switch", "namespace": ns}, "data": {"mode": "on"}})).await;
    create_flow(
        &client,
        &ns,
        "guarded",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "when", "condition": mode_is(&ns, "on")},
            mark(&ns, "allowed"),
            {"type": "when", "condition": mode_is(&ns, "off")},
            mark(&ns, "refused"),
            mark(&ns, "after")
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "guarded", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(step(&status, "spec.steps[1]")["phase"], "Succeeded");
    assert_eq!(
        step(&status, "spec.steps[3]")["phase"],
        "Skipped",
        "{status:#}"
    );
    assert_eq!(step(&status, "spec.steps[4]")["phase"], "Succeeded");
    assert!(cm(&client, &ns, "allowed").await.is_some());
    assert!(cm(&client, &ns, "refused").await.is_none());
    assert!(cm(&client, &ns, "after").await.is_some());
    assert_eq!(
        nodes_of(&flow_jobs(&client, &ns, "guarded").await),
        ["s0", "s1", "s2", "s4"],
        "two condition Jobs and the two steps that ran"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_runs_its_steps_for_each_item_of_an_evaluated_list() {
    let (client, ns, ctl) = setup("loop", cm_rules(), json!([])).await;
    create_flow(&client, &ns, "colours", json!({"serviceAccountName": "flow", "vars": {"csv": "red,green,blue"}, "steps": [
        {"type": "eval", "expression": "${csv}.split(',')", "var": "colours"},
        {"type": "loop", "forEach": "${colours}", "steps": [
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "colour-${item}", "namespace": ns}, "data": {"index": "${index | string}"}}}
        ]}
    ]}))
    .await;
    let status = wait_done(&client, &ns, "colours", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    for (i, colour) in ["red", "green", "blue"].iter().enumerate() {
        let made = cm(&client, &ns, &format!("colour-{colour}"))
            .await
            .unwrap_or_else(|| panic!("colour-{colour} missing"));
        assert_eq!(made.data.unwrap()["index"], i.to_string());
    }
    let jobs = flow_jobs(&client, &ns, "colours").await;
    let instances: Vec<String> = jobs
        .iter()
        .map(|j| common::annotation(j, "ops.example.com/instance"))
        .collect();
    assert_eq!(instances, ["0", "1", "2"], "one Job per item, in order");
    for pair in jobs.windows(2) {
        assert!(
            created(&pair[1]) >= work_ended(&client, &pair[0]).await.unwrap(),
            "items run one after another"
        );
    }
    let body = step(&status, "spec.steps[1].steps[0]");
    assert_eq!(body["instances"]["succeeded"], 3, "{status:#}");
    ctl.abort();
}

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
    wait_status(&client, &ns, "chatty", 60, "the second run done", |st| {
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

/// A flow whose first step waits for ConfigMap `gate`, then creates ConfigMap `after`.
fn gated(ns: &str, policy: &str) -> Value {
    // `isolate`: the second step gets a Job of its own instead of sharing the waitFor's
    // (step fusion), so the tests can tell from Jobs which run reached which step.
    let mut after = mark(ns, "after");
    after["isolate"] = json!(true);
    json!({"serviceAccountName": "flow", "options": {"concurrencyPolicy": policy}, "steps": [
        {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "gate", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 300},
        after
    ]})
}

/// The id the controller gives the run of flow `name`'s current generation with `trigger`.
async fn run_id_now(client: &Client, ns: &str, name: &str, trigger: &str) -> String {
    let flow = flows(client, ns).get(name).await.unwrap();
    run_id(
        flow.metadata.uid.as_deref().unwrap(),
        flow.metadata.generation.unwrap(),
        Some(trigger),
    )
}

/// A [`gated`] flow under a concurrency policy whose first run waits at its gate while a
/// second run (trigger "2") is requested.
struct TwoRuns {
    client: Client,
    ns: String,
    ctl: tokio::task::JoinHandle<()>,
    flow: &'static str,
    first_id: String,
    second_id: String,
}

impl TwoRuns {
    /// Starts flow `flow` gated under `policy` in a namespace named after `prefix`, waits for its
    /// first run to wait at the gate and requests the second.
    async fn start(prefix: &str, flow: &'static str, policy: &str) -> Self {
        let (client, ns, ctl) = setup(prefix, cm_rules(), json!([])).await;
        create_flow(&client, &ns, flow, gated(&ns, policy)).await;
        let first = wait_status(&client, &ns, flow, 60, "a running first step", |st| {
            st["phase"] == "Running" && st["currentStep"].is_string()
        })
        .await;
        let first_id = first["run"]["id"].as_str().unwrap().to_string();
        request_run(&client, &ns, flow, "2").await;
        let second_id = run_id_now(&client, &ns, flow, "2").await;
        TwoRuns {
            client,
            ns,
            ctl,
            flow,
            first_id,
            second_id,
        }
    }

    /// Opens the gate and waits until the second run succeeded; its status.
    async fn open_gate_until_the_second_succeeds(&self) -> Value {
        let (client, ns) = (&self.client, &self.ns);
        apply(client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "namespace": ns}})).await;
        wait_status(client, ns, self.flow, 90, "the second run done", |st| {
            st["run"]["id"] == json!(self.second_id) && st["phase"] == "Succeeded"
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbid_queues_a_new_run_until_the_running_one_ends() {
    let runs = TwoRuns::start("forbid", "serial", "Forbid").await;
    let (client, ns) = (&runs.client, &runs.ns);
    let (first_id, second_id) = (&runs.first_id, &runs.second_id);
    let queued = wait_status(client, ns, "serial", 30, "a queued run", |st| {
        st["queuedRun"]["id"] == json!(second_id)
    })
    .await;
    assert_eq!(
        queued["run"]["id"],
        json!(first_id),
        "the first run goes on"
    );
    assert_eq!(queued["phase"], "Running");
    let before = flow_jobs(client, ns, "serial").await;
    assert_eq!(before.len(), 1, "nothing of the queued run started");
    let status = runs.open_gate_until_the_second_succeeds().await;
    assert_eq!(status["run"]["trigger"], "2", "{status:#}");
    // Jobs are listed by name, so group them by run.
    let jobs = flow_jobs(client, ns, "serial").await;
    let of_run = |id: &str| -> Vec<&Job> { jobs.iter().filter(|j| run_label(j) == id).collect() };
    let (first_jobs, second_jobs) = (of_run(first_id), of_run(second_id));
    assert_eq!(
        (first_jobs.len(), second_jobs.len(), jobs.len()),
        (2, 2, 4),
        "the whole first run, then the whole second"
    );
    let mut first_end = 0;
    for j in &first_jobs {
        first_end = first_end.max(work_ended(client, j).await.unwrap());
    }
    let second_start = second_jobs.iter().map(|j| created(j)).min().unwrap();
    assert!(
        second_start >= first_end,
        "the second run started after the first ended"
    );
    runs.ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_is_no_longer_reported_as_queued_once_it_started() {
    let runs = TwoRuns::start("forbid-status", "serial", "Forbid").await;
    wait_status(&runs.client, &runs.ns, "serial", 30, "a queued run", |st| {
        st["queuedRun"]["id"] == json!(runs.second_id)
    })
    .await;
    let status = runs.open_gate_until_the_second_succeeds().await;
    assert!(
        status.get("queuedRun").is_none(),
        "nothing is queued any more: {status:#}"
    );
    assert!(
        status.get("currentStep").is_none(),
        "nothing is running any more: {status:#}"
    );
    runs.ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_runs_a_new_run_beside_the_running_one() {
    let runs = TwoRuns::start("allow", "side", "Allow").await;
    let (client, ns) = (&runs.client, &runs.ns);
    let (first_id, second_id) = (&runs.first_id, &runs.second_id);
    eventually(30, "the second run's first Job", || async {
        flow_jobs(client, ns, "side").await.len() == 2
    })
    .await;
    let waits = flow_jobs(client, ns, "side").await;
    // One Job of each run (listed by name, so in no particular run order).
    let mut run_ids: Vec<String> = waits.iter().map(run_label).collect();
    run_ids.sort();
    let mut expected = vec![first_id.clone(), second_id.clone()];
    expected.sort();
    assert_eq!(run_ids, expected);
    assert!(
        waits.iter().all(|j| finished(j).is_none()),
        "both runs wait side by side"
    );
    let status = runs.open_gate_until_the_second_succeeds().await;
    assert_eq!(status["run"]["trigger"], "2", "status shows the newest run");
    // The first run must go on too: its second step runs and its end is reported.
    eventually(30, "both runs' second step", || async {
        flow_jobs(client, ns, "side")
            .await
            .iter()
            .filter(|j| job_node(j) == "s1")
            .count()
            == 2
    })
    .await;
    let done: Vec<String> = flow_events(client, ns, "side")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("RunSucceeded"))
        .filter_map(|e| e.message)
        .collect();
    assert!(
        done.contains(&format!("run {first_id} succeeded")),
        "{done:?}"
    );
    runs.ctl.abort();
}

/// One HTTP GET on 127.0.0.1:`port`; the raw response.
async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut last_err = None;
    for _ in 0..50 {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(mut sock) => {
                sock.write_all(
                    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .await
                .unwrap();
                let mut out = String::new();
                sock.read_to_string(&mut out).await.unwrap();
                return out;
            }
            Err(e) => last_err = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("metrics endpoint not reachable: {last_err:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_runs_step_durations_and_active_flows() {
    let (client, ns) = prepare("metrics", cm_rules(), json!([])).await;
    let metrics = Arc::new(Metrics::default());
    let ctl = start_controller_with(&client, &ns, metrics.clone());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = tokio::spawn(metrics::serve(
        ([127, 0, 0, 1], port).into(),
        metrics.clone(),
    ));
    create_flow(&client, &ns, "good", json!({"serviceAccountName": "flow", "steps": [
        {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "gate", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 300},
        mark(&ns, "made"),
        exec("true")
    ]}))
    .await;
    create_flow(
        &client,
        &ns,
        "bad",
        json!({"serviceAccountName": "flow", "steps": [exec("exit 1")]}),
    )
    .await;
    let bad = wait_done(&client, &ns, "bad", 60).await;
    assert_eq!(bad["phase"], "Failed");
    eventually(30, "one active flow while `good` waits", || async {
        metrics.render().contains("\npseudoflow_active_flows 1\n")
    })
    .await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "namespace": ns}})).await;
    let good = wait_done(&client, &ns, "good", 60).await;
    assert_eq!(good["phase"], "Succeeded", "{good:#}");
    eventually(10, "no active flow", || async {
        metrics.render().contains("\npseudoflow_active_flows 0\n")
    })
    .await;
    let text = metrics.render();
    for line in [
        format!("pseudoflow_runs_total{{flow=\"{ns}/good\",status=\"Succeeded\"}} 1"),
        format!("pseudoflow_runs_total{{flow=\"{ns}/bad\",status=\"Failed\"}} 1"),
        format!(
            "pseudoflow_step_duration_seconds_count{{flow=\"{ns}/good\",step_type=\"waitFor\"}} 1"
        ),
        format!(
            "pseudoflow_step_duration_seconds_count{{flow=\"{ns}/good\",step_type=\"apply\"}} 1"
        ),
        format!(
            "pseudoflow_step_duration_seconds_count{{flow=\"{ns}/good\",step_type=\"exec\"}} 1"
        ),
        format!("pseudoflow_step_duration_seconds_count{{flow=\"{ns}/bad\",step_type=\"exec\"}} 1"),
    ] {
        assert!(
            text.contains(&format!("{line}\n")),
            "missing {line}:\n{text}"
        );
    }
    assert!(
        !text.contains(&format!("flow=\"{ns}/good\",status=\"Failed\"")),
        "{text}"
    );
    let response = http_get(port, "/metrics").await;
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    let body = response.split_once("\r\n\r\n").unwrap().1;
    assert_eq!(body, metrics.render(), "the endpoint serves render()");
    server.abort();
    ctl.abort();
}

/// The value of the series `name{labels}` in `text`, if present.
fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name_and_labels} ")))
        .map(|v| v.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_type_is_timed_to_the_sub_second_a_running_step_shows_its_age_and_a_deleted_flow_leaves_no_series(
) {
    let (client, ns) = prepare("metrics-steps", cm_rules(), json!([])).await;
    let metrics = Arc::new(Metrics::default());
    let ctl = start_controller_with(&client, &ns, metrics.clone());
    let flow = format!("{ns}/timed");
    create_flow(&client, &ns, "timed", json!({"serviceAccountName": "flow", "steps": [
        {"type": "log", "message": "starting"},
        {"type": "eval", "expression": "1 + 1", "var": "two"},
        {"type": "loop", "forEach": ["a"], "steps": [mark(&ns, "made-${item}")]},
        {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "never", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 600}
    ]}))
    .await;
    eventually(60, "the waitFor step reported as running", || async {
        sample(
            &metrics.render(),
            &format!("pseudoflow_step_running_seconds{{flow=\"{flow}\",step_type=\"waitFor\"}}"),
        )
        .is_some_and(|age| age > 0.0)
    })
    .await;
    let text = metrics.render();
    let series = |ty: &str, what: &str| {
        sample(
            &text,
            &format!(
                "pseudoflow_step_duration_seconds_{what}{{flow=\"{flow}\",step_type=\"{ty}\"}}"
            ),
        )
        .unwrap_or_else(|| panic!("no {what} for {ty}:\n{text}"))
    };
    // Controller-local and structural steps are timed too, not only Job steps.
    for ty in ["log", "eval", "loop", "apply"] {
        assert_eq!(series(ty, "count"), 1.0, "{ty}:\n{text}");
    }
    // Controller-local steps take milliseconds: they land in the sub-second buckets.
    for ty in ["log", "eval"] {
        assert!(series(ty, "sum") < 0.5, "{ty}:\n{text}");
    }
    // A Job step's time is not rounded to whole seconds.
    let apply = series("apply", "sum");
    assert!(
        apply > 0.0 && apply.fract() != 0.0,
        "apply took {apply}:\n{text}"
    );
    assert!(
        series("loop", "sum") >= apply,
        "the loop contains the apply:\n{text}"
    );
    assert!(text.contains("\npseudoflow_active_flows 1\n"), "{text}");

    // Deleting the flow mid-run drops its series, and no later reconcile brings them back.
    common::flows(&client, &ns)
        .delete("timed", &Default::default())
        .await
        .unwrap();
    eventually(30, "no active flow after the deletion", || async {
        metrics.render().contains("\npseudoflow_active_flows 0\n")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let text = metrics.render();
    assert!(text.contains("\npseudoflow_active_flows 0\n"), "{text}");
    assert!(
        !text.contains(&flow),
        "no series of the deleted flow:\n{text}"
    );
    ctl.abort();
}
