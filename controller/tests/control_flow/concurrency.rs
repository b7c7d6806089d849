//! `concurrencyPolicy` end to end on testenv: Forbid queues a new run until the running one ends
//! (and stops calling it queued once it started), Allow runs it beside the running one.

use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use serde_json::{json, Value};

use crate::common::api::eventually;
use crate::common::shorthand::{cm_rules, flow_jobs, mark, run_id_now, run_label};
use crate::common::{
    apply, create_flow, created, finished, flow_events, job_node, request_run, setup, wait_status,
    work_ended,
};

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
    // Its end is published after its last Job ends: wait for the Event, do not race it.
    let first_done = format!("run {first_id} succeeded");
    eventually(30, "the first run's RunSucceeded Event", || async {
        flow_events(client, ns, "side")
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("RunSucceeded"))
            .any(|e| e.message.as_deref() == Some(first_done.as_str()))
    })
    .await;
    runs.ctl.abort();
}
