//! `run` and `stop`: a run started now, once per request; the running run aborted.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use pseudoflow_test_support::{create_flow, flows, wait_done};
use serde_json::json;

use crate::support::{namespace, pf, start_controller};

/// `kubectl pf run` starts a run now, of an unscheduled flow and of a scheduled one before its
/// first slot (as `kubectl create job --from`), once per request; `kubectl pf stop` ends the
/// running run: its Job deleted, its next step never started, the run Aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_starts_a_run_now_and_stop_aborts_the_running_one() {
    let (client, ns) = namespace("pf-runstop").await;
    let ctl = start_controller(&client, &ns);
    let log = json!([{"type": "log", "message": "hi"}]);
    create_flow(
        &client,
        &ns,
        "once",
        json!({"serviceAccountName": "flow", "steps": log}),
    )
    .await;
    let first = wait_done(&client, &ns, "once", 60).await;
    let o = pf(&["run", "once", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let st = wait_done(&client, &ns, "once", 60).await;
    assert_ne!(st["run"]["id"], first["run"]["id"], "{st:#}");
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert!(
        o.stdout.contains(&format!(
            "run {} started",
            st["run"]["id"].as_str().unwrap()
        )),
        "{}",
        o.stdout
    );

    // Yearly: its first slot is months away, so only `run` starts it.
    create_flow(
        &client,
        &ns,
        "yearly",
        json!({"serviceAccountName": "flow", "schedule": "0 0 1 1 *", "steps": log}),
    )
    .await;
    pseudoflow_test_support::wait_status(&client, &ns, "yearly", 60, "waiting", |s| {
        s["reason"] == "WaitingForSchedule"
    })
    .await;
    let o = pf(&["run", "yearly", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let st = wait_done(&client, &ns, "yearly", 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let manual = st["run"]["id"].clone();
    assert!(o.stdout.contains("started"), "{}", o.stdout);
    // The request is served once: no second run from the same value.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = flows(&client, &ns).get("yearly").await.unwrap().data["status"].clone();
    assert_eq!(st["run"]["id"], manual, "one run per request: {st:#}");
    assert!(
        st["nextScheduleTime"].is_string(),
        "still scheduled: {st:#}"
    );

    // Stop: a step waiting (in its Job) for a ConfigMap that never comes, then a step after it.
    create_flow(&client, &ns, "long", json!({"serviceAccountName": "flow", "steps": [
        {"name": "wait", "type": "waitFor", "isolate": true, "resource": {"kind": "ConfigMap", "name": "never", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 600},
        {"name": "after", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after", "namespace": ns}}}
    ]}))
    .await;
    let running =
        pseudoflow_test_support::wait_status(&client, &ns, "long", 60, "waiting in its Job", |s| {
            s["phase"] == "Running" && s["steps"][0]["phase"] == "Running"
        })
        .await;
    let run = running["run"]["id"].as_str().unwrap().to_string();
    let run_jobs = || async {
        Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels(&format!("ops.example.com/run={run}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .count()
    };
    assert_eq!(run_jobs().await, 1, "the wait step runs in its Job");
    let o = pf(&["stop", "long", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains(&format!("run {run} aborted")),
        "{}",
        o.stdout
    );
    let st = flows(&client, &ns).get("long").await.unwrap().data["status"].clone();
    assert_eq!(
        (st["phase"].as_str(), st["reason"].as_str()),
        (Some("Aborted"), Some("Aborted")),
        "{st:#}"
    );
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("Aborted")),
        "{st:#}"
    );
    assert_eq!(st["steps"][0]["phase"], "Aborted", "{st:#}");
    pseudoflow_test_support::eventually(30, "the running Job deleted", || async {
        run_jobs().await == 0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    assert!(
        cms.get_opt("after").await.unwrap().is_none(),
        "no step started after the stop"
    );
    let st = flows(&client, &ns).get("long").await.unwrap().data["status"].clone();
    assert_eq!(
        st["run"]["id"],
        run.as_str(),
        "the stop started no run: {st:#}"
    );
    assert_eq!(st["phase"], "Aborted", "{st:#}");
    // Nothing running now: refused, nothing asked of the controller.
    let o = pf(&["stop", "long", "-n", &ns]).await;
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr.contains("is not running (Aborted)"),
        "{}",
        o.stderr
    );
    ctl.abort();
}
