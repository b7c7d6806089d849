//! Retrying a run (`ops.example.com/retry`, what `kubectl pf retry` sets) and holding a running
//! run with `spec.suspend`, end to end on a real control plane (testenv): what ran is counted by
//! the ConfigMaps the steps create, so "not run again" is seen on the cluster, not in status.
//! The walk rules themselves are unit-tested in `walk/src/retry/tests.rs`.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::{create_flow, flow_events, flows, setup, step, wait_done, wait_status};

/// What the flows of these tests may do in their namespace: ConfigMaps, read and write.
fn cm_rules() -> Value {
    json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}])
}

/// An exec step named `name` that records each of its runs as a ConfigMap `<name>-<n>`, then
/// runs `then`.
fn counted(name: &str, then: &str) -> Value {
    json!({"type": "exec", "name": name, "cmd": format!(
        "n=$(kubectl get configmaps -o name | grep -c /{name}-); kubectl create configmap {name}-$n >/dev/null; {then}"
    )})
}

fn with_var(mut step: Value, var: &str) -> Value {
    step["var"] = json!(var);
    step
}

/// How many times step `name` of [`counted`] ran.
async fn runs_of(client: &Client, ns: &str, name: &str) -> usize {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix(&format!("{name}-")))
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .count()
}

async fn annotate(client: &Client, ns: &str, flow: &str, annotations: Value) {
    flows(client, ns)
        .patch(
            flow,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .unwrap();
}

async fn set_suspend(client: &Client, ns: &str, flow: &str, suspend: bool) {
    flows(client, ns)
        .patch(
            flow,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": suspend}})),
        )
        .await
        .unwrap();
}

async fn reasons(client: &Client, ns: &str, flow: &str) -> Vec<(String, String)> {
    flow_events(client, ns, flow)
        .await
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_keeps_the_steps_that_succeeded_with_their_outputs_and_restarts_at_the_failed_one()
{
    let (client, ns, ctl) = setup("retry-failed", cm_rules(), json!([])).await;
    create_flow(&client, &ns, "deploy", json!({"serviceAccountName": "flow", "steps": [
        counted("prepare", "echo tok-$n"),
        {"type": "exec", "name": "token", "cmd": "kubectl get configmap prepare-0 -o name", "var": "token"},
        counted("gate", "kubectl get configmap gate >/dev/null"),
        counted("finish", "d=done-$(echo ${token} | tr / -); kubectl get configmap $d >/dev/null 2>&1 || kubectl create configmap $d")
    ]}))
    .await;
    let failed = wait_done(&client, &ns, "deploy", 120).await;
    assert_eq!(failed["phase"], "Failed", "{failed:#}");
    assert_eq!(
        step(&failed, "spec.steps[2]")["phase"],
        "Failed",
        "{failed:#}"
    );
    let failed_run = failed["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        (
            runs_of(&client, &ns, "prepare").await,
            runs_of(&client, &ns, "finish").await
        ),
        (1, 0)
    );

    // Fix what failed, then retry.
    crate::common::apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "namespace": ns}})).await;
    annotate(
        &client,
        &ns,
        "deploy",
        json!({"ops.example.com/retry": "1"}),
    )
    .await;
    let retried = wait_status(&client, &ns, "deploy", 120, "the retry succeeded", |st| {
        st["run"]["retryOf"] == failed_run.as_str() && st["phase"] == "Succeeded"
    })
    .await;
    assert_ne!(retried["run"]["id"], failed_run.as_str(), "{retried:#}");
    assert_eq!(retried["run"]["retriedFrom"], "gate", "{retried:#}");
    // The steps before the failed one did not run again; the failed one and the rest did.
    assert_eq!(
        runs_of(&client, &ns, "prepare").await,
        1,
        "prepare ran once"
    );
    assert_eq!(runs_of(&client, &ns, "gate").await, 2, "gate ran again");
    assert_eq!(runs_of(&client, &ns, "finish").await, 1);
    // finish used the output of a step kept from the failed run.
    assert!(
        crate::common::harness::config_map(&client, &ns, "done-configmap-prepare-0")
            .await
            .is_some(),
        "the kept step's output was restored"
    );
    let events = reasons(&client, &ns, "deploy").await;
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Retrying" && m.contains(&failed_run)),
        "{events:?}"
    );

    // The same value again is not a new request; a new value with retry-from reruns from there.
    crate::common::request_run(&client, &ns, "deploy", "unrelated").await;
    let rerun = wait_status(&client, &ns, "deploy", 120, "the manual re-run", |st| {
        st["run"]["trigger"] == "unrelated" && st["phase"] == "Succeeded"
    })
    .await;
    assert!(rerun["run"]["retryOf"].is_null(), "{rerun:#}");
    assert_eq!(runs_of(&client, &ns, "prepare").await, 2);
    let rerun_id = rerun["run"]["id"].as_str().unwrap().to_string();
    annotate(
        &client,
        &ns,
        "deploy",
        json!({"ops.example.com/retry": "2", "ops.example.com/retry-from": "finish"}),
    )
    .await;
    let from = wait_status(&client, &ns, "deploy", 120, "the retry from finish", |st| {
        st["run"]["retryOf"] == rerun_id.as_str() && st["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(from["run"]["retriedFrom"], "finish", "{from:#}");
    assert_eq!(
        runs_of(&client, &ns, "prepare").await,
        2,
        "not before finish"
    );
    assert_eq!(runs_of(&client, &ns, "gate").await, 3, "not before finish");
    assert_eq!(runs_of(&client, &ns, "finish").await, 3, "finish ran again");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_asked_while_a_run_runs_is_refused_and_never_fires_later() {
    let (client, ns, ctl) = setup("retry-running", cm_rules(), json!([])).await;
    create_flow(&client, &ns, "slow", json!({"serviceAccountName": "flow", "steps": [
        {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "go", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 300},
        counted("after", "kubectl get configmap never-there")
    ]}))
    .await;
    let running =
        crate::common::api::wait_step_running(&client, &ns, "slow", "spec.steps[0]").await;
    let run = running["run"]["id"].as_str().unwrap().to_string();
    annotate(
        &client,
        &ns,
        "slow",
        json!({"ops.example.com/retry": "now"}),
    )
    .await;
    crate::common::api::eventually(30, "a RetryRefused Event", || async {
        reasons(&client, &ns, "slow")
            .await
            .iter()
            .any(|(r, m)| r == "RetryRefused" && m.contains("still running"))
    })
    .await;
    crate::common::apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "go", "namespace": ns}})).await;
    let ended = wait_done(&client, &ns, "slow", 120).await;
    assert_eq!(ended["phase"], "Failed", "{ended:#}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let status = flows(&client, &ns).get("slow").await.unwrap().data["status"].clone();
    assert_eq!(
        status["run"]["id"],
        run.as_str(),
        "no retry after the run ended: {status:#}"
    );
    assert_eq!(runs_of(&client, &ns, "after").await, 1);
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_holds_a_running_run_and_resume_continues_the_same_run() {
    let (client, ns, ctl) = setup("suspend-hold", cm_rules(), json!([])).await;
    create_flow(&client, &ns, "held", json!({"serviceAccountName": "flow", "steps": [
        // `second` reads `first`'s output, so the two are not fused into one Job: suspend
        // holds between Jobs (a fused segment runs to its end, as one unit of work).
        with_var(counted("first", "until kubectl get configmap release >/dev/null 2>&1; do sleep 0.2; done; echo yes"), "released"),
        counted("second", "test ${released} = yes")
    ]}))
    .await;
    let running =
        crate::common::api::wait_step_running(&client, &ns, "held", "spec.steps[0]").await;
    let run = running["run"]["id"].as_str().unwrap().to_string();
    set_suspend(&client, &ns, "held", true).await;
    let held = wait_status(&client, &ns, "held", 30, "reason Suspended", |st| {
        st["reason"] == "Suspended"
    })
    .await;
    assert_eq!(held["phase"], "Running", "{held:#}");
    assert!(
        held["message"].as_str().unwrap().starts_with("suspended:"),
        "{held:#}"
    );
    // The running step finishes; the next one does not start while suspended.
    crate::common::apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "release", "namespace": ns}})).await;
    wait_status(&client, &ns, "held", 60, "the first step done", |st| {
        step(st, "spec.steps[0]")["phase"] == "Succeeded"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let still = flows(&client, &ns).get("held").await.unwrap().data["status"].clone();
    assert_eq!(
        (still["phase"].as_str(), still["reason"].as_str()),
        (Some("Running"), Some("Suspended")),
        "{still:#}"
    );
    assert_eq!(
        runs_of(&client, &ns, "second").await,
        0,
        "nothing new started: {still:#}"
    );
    // Resume: the same run goes on from where it stopped.
    set_suspend(&client, &ns, "held", false).await;
    let done = wait_done(&client, &ns, "held", 120).await;
    assert_eq!(done["phase"], "Succeeded", "{done:#}");
    assert_eq!(
        done["run"]["id"],
        run.as_str(),
        "resume is not a new run: {done:#}"
    );
    assert_eq!(done["observedGeneration"], 3, "{done:#}");
    assert_eq!(
        (
            runs_of(&client, &ns, "first").await,
            runs_of(&client, &ns, "second").await
        ),
        (1, 1)
    );
    ctl.abort();
}
