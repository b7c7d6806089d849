//! The controller end to end on a real control plane (testenv): flows run to Succeeded through
//! executor Jobs under their own ServiceAccount, typos are InvalidSpec before any Job, a missing
//! permission fails naming the step, and a restarted controller creates no Job twice.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::wait::await_condition;
use kube::Client;
use serde_json::json;

use crate::common::{apply, cond, create_flow, flows, setup, start_controller, wait_done};

async fn jobs_per_node(client: &Client, ns: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for j in Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        let node = j
            .metadata
            .annotations
            .unwrap_or_default()
            .get("ops.example.com/node-id")
            .cloned()
            .unwrap_or_default();
        let inst = j.metadata.name.unwrap_or_default();
        *out.entry(format!("{node}:{inst}")).or_insert(0) += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_runs_to_succeeded_under_its_own_service_account() {
    let (client, ns, ctl) = setup(
        "happy",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]),
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}]),
    )
    .await;
    let label = format!("e2e-{ns}");
    create_flow(&client, &ns, "happy", json!({
        "serviceAccountName": "flow",
        "vars": {"greeting": "hello"},
        "steps": [
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made", "namespace": ns}, "data": {"g": "${greeting}"}}},
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "made", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 60},
            {"type": "setLabel", "target": {"kind": "Node", "name": "worker-0"}, "labels": {label.clone(): "yes"}},
            {"type": "log", "message": "done with ${greeting}"}
        ]
    })).await;
    let status = wait_done(&client, &ns, "happy", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(cond(&status, "Ready"), "True");
    assert_eq!(cond(&status, "Degraded"), "False");
    assert_eq!(status["progress"], "4/4", "{status:#}");
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("made")
        .await
        .unwrap();
    assert_eq!(
        cm.data.unwrap()["g"],
        "hello",
        "vars substituted into the manifest"
    );
    let node = Api::<Node>::all(client.clone())
        .get("worker-0")
        .await
        .unwrap();
    assert_eq!(node.metadata.labels.unwrap()[&label], "yes");
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        jobs.len(),
        1,
        "apply, waitFor, setLabel share one Job (step fusion); log needs none"
    );
    assert!(jobs
        .iter()
        .all(|j| crate::common::service_account(j) == Some("flow")));
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_from_a_json_map_the_seed_example() {
    let (client, ns, ctl) = setup("labelmap", json!([]), json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}])).await;
    let key = format!("env-{ns}");
    let mapping =
        json!({"worker-0": {key.clone(): "stage"}, "worker-1": {key.clone(): "prod"}}).to_string();
    // The seed's §10 flow with this cluster's node names.
    create_flow(&client, &ns, "labels-from-map", json!({
        "serviceAccountName": "flow",
        "vars": {"mapping": mapping},
        "steps": [
            {"type": "eval", "expression": "json(${mapping})", "var": "_map"},
            {"type": "patchLabel", "target": {"kind": "Node", "selector": ""}, "fromVar": "_map"}
        ]
    })).await;
    let status = wait_done(&client, &ns, "labels-from-map", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let nodes = Api::<Node>::all(client.clone());
    assert_eq!(
        nodes
            .get("worker-0")
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap()[&key],
        "stage"
    );
    assert_eq!(
        nodes
            .get("worker-1")
            .await
            .unwrap()
            .metadata
            .labels
            .unwrap()[&key],
        "prod"
    );
    assert!(!nodes
        .get("cp-0")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap()
        .contains_key(&key));
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typo_is_invalid_spec_before_any_job() {
    let (client, ns, ctl) = setup("typo", json!([]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "typo",
        json!({"steps": [
            {"type": "log", "message": "fine"},
            {"type": "retry", "attempts": 2, "steps": [{"type": "sleep", "seconds": "ten"}]}
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "typo", 60).await;
    assert_eq!(status["reason"], "InvalidSpec", "{status:#}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("spec.steps[1].steps[0].seconds: expected integer, got \"ten\""),
        "{status:#}"
    );
    assert_eq!(cond(&status, "Ready"), "False");
    assert!(
        Api::<Job>::namespaced(client, &ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "nothing ran"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_fails_naming_the_step_and_touches_nothing_else() {
    let (client, ns, ctl) = setup(
        "forbidden",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
        json!([]),
    )
    .await;
    create_flow(&client, &ns, "forbidden", json!({"serviceAccountName": "flow", "steps": [
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nope", "namespace": ns}}},
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "never", "namespace": ns}}}
    ]})).await;
    let status = wait_done(&client, &ns, "forbidden", 120).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let msg = status["message"].as_str().unwrap();
    assert!(
        msg.starts_with("spec.steps[0]") && msg.contains("forbidden"),
        "{msg}"
    );
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    assert!(
        cms.get_opt("nope").await.unwrap().is_none()
            && cms.get_opt("never").await.unwrap().is_none()
    );
    assert_eq!(
        Api::<Job>::namespaced(client, &ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1,
        "fail-fast: the second step never ran"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_continues_without_creating_a_job_twice() {
    let (client, ns, first) = setup("restart", json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]), json!([])).await;
    // isolate: a Job per step, so the restarted controller has Jobs of several steps to find
    // (fused steps would share one; progress/resume of a segment is in fusion.rs).
    let cm = |n: &str| json!({"type": "apply", "isolate": true, "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": ns}}});
    create_flow(&client, &ns, "restart", json!({"serviceAccountName": "flow", "steps": [cm("one"), {"type": "sleep", "seconds": 3}, cm("two"), cm("three")]})).await;
    // Stop the controller as soon as the first Job exists, mid-flow.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let first_job = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if !jobs
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    first_job.await.expect("a first Job");
    first.abort();
    let _ = first.await;
    let second = start_controller(&client, &ns);
    let status = wait_done(&client, &ns, "restart", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let per_node = jobs_per_node(&client, &ns).await;
    assert_eq!(per_node.len(), 3, "one Job per API step: {per_node:?}");
    assert!(per_node.values().all(|n| *n == 1), "{per_node:?}");
    second.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_timeout_fails_with_reason_timeout_and_its_jobs_are_deleted() {
    let (client, ns, ctl) = setup("timeout", json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]), json!([])).await;
    create_flow(&client, &ns, "slow", json!({"serviceAccountName": "flow", "options": {"timeoutSeconds": 3}, "steps": [
        {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "never-created", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 300}
    ]})).await;
    let status = wait_done(&client, &ns, "slow", 60).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(status["reason"], "Timeout", "{status:#}");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !jobs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .all(|j| j.metadata.deletion_timestamp.is_some())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the running waitFor Job was not deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_aborts_the_running_run_and_deletes_its_jobs() {
    let (client, ns, ctl) = setup("replace", json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]), json!([])).await;
    let spec = json!({"serviceAccountName": "flow", "options": {"concurrencyPolicy": "Replace"}, "steps": [
        {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "gate", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 300}
    ]});
    create_flow(&client, &ns, "replaced", spec.clone()).await;
    let api = flows(&client, &ns);
    let running =
        |o: Option<&DynamicObject>| o.is_some_and(|f| f.data["status"]["phase"] == "Running");
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(api.clone(), "replaced", running),
    )
    .await
    .unwrap()
    .unwrap();
    let first_run = api.get("replaced").await.unwrap().data["status"]["run"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A manual re-run while the first is still waiting: Replace aborts the first.
    apply(&client, json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {"name": "replaced", "namespace": ns, "annotations": {"ops.example.com/run": "2"}}, "spec": spec})).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let old = jobs
            .list(&ListParams::default().labels(&format!("ops.example.com/run={first_run}")))
            .await
            .unwrap()
            .items;
        if old.iter().all(|j| j.metadata.deletion_timestamp.is_some()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first run's Job was not deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "namespace": ns}})).await;
    let status = wait_done(&client, &ns, "replaced", 60).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_ne!(
        status["run"]["id"],
        json!(first_run),
        "the new run finished"
    );
    assert_eq!(status["run"]["trigger"], "2");
    // The replaced run is still told: Aborted, because a newer run replaced it (seed: phase
    // Aborted for it), with when it was stopped.
    let previous = &status["previousRuns"][0];
    assert_eq!(previous["id"], json!(first_run), "{status:#}");
    assert_eq!(previous["phase"], "Aborted", "{status:#}");
    assert_eq!(previous["reason"], "Replaced", "{status:#}");
    assert!(previous["finishedAt"].is_string(), "{status:#}");
    ctl.abort();
}

/// `ops.example.com/stop` naming the running run (what `kubectl pf stop` sets): its Job deleted,
/// its next step never started, the run Aborted (reason Aborted, Ready False); under Forbid the
/// run queued behind it then starts, and the stopped run is told in previousRuns. A stop naming a
/// run that already ended does nothing to the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_annotation_aborts_the_named_running_run_and_the_queued_one_starts() {
    let (client, ns, ctl) = setup("stop", json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]), json!([])).await;
    let spec = json!({"serviceAccountName": "flow", "options": {"concurrencyPolicy": "Forbid"}, "steps": [
        {"name": "gate", "type": "waitFor", "isolate": true, "resource": {"kind": "ConfigMap", "name": "gate", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 300},
        {"name": "after", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after", "namespace": ns}}}
    ]});
    create_flow(&client, &ns, "stopped", spec.clone()).await;
    let api = flows(&client, &ns);
    let running = |o: Option<&DynamicObject>| {
        o.is_some_and(|f| f.data["status"]["steps"][0]["phase"] == "Running")
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(api.clone(), "stopped", running),
    )
    .await
    .unwrap()
    .unwrap();
    let first = api.get("stopped").await.unwrap().data["status"]["run"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A second run asked for: queued behind the first (Forbid).
    crate::common::request_run(&client, &ns, "stopped", "2").await;
    crate::common::wait_status(&client, &ns, "stopped", 30, "a queued run", |s| {
        s["queuedRun"].is_object()
    })
    .await;
    let stop = |id: String| json!({"metadata": {"annotations": {"ops.example.com/stop": id}}});
    api.patch(
        "stopped",
        &Default::default(),
        &kube::api::Patch::Merge(stop(first.clone())),
    )
    .await
    .unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let first_jobs = || async {
        jobs.list(&ListParams::default().labels(&format!("ops.example.com/run={first}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .count()
    };
    crate::common::eventually(30, "the stopped run's Job deleted", || async {
        first_jobs().await == 0
    })
    .await;
    // The queued run starts and waits at the gate in turn; the gate opened, it ends well.
    let second =
        crate::common::wait_status(&client, &ns, "stopped", 30, "the queued run running", |s| {
            s["run"]["trigger"] == "2" && s["phase"] == "Running"
        })
        .await;
    let previous = &second["previousRuns"][0];
    assert_eq!(previous["id"], json!(first), "{second:#}");
    assert_eq!(
        (previous["phase"].as_str(), previous["reason"].as_str()),
        (Some("Aborted"), Some("Aborted")),
        "{second:#}"
    );
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "namespace": ns}})).await;
    let done = wait_done(&client, &ns, "stopped", 60).await;
    assert_eq!(
        done["phase"], "Succeeded",
        "the stop named the first run only: {done:#}"
    );
    assert_eq!(done["run"]["trigger"], "2", "{done:#}");
    ctl.abort();
}

/// The status a stop leaves while it is the current run: Aborted, reason Aborted, Ready False
/// with reason Aborted, the running step Aborted; no new run starts from the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_reads_aborted_with_ready_false() {
    let (client, ns, ctl) = setup("stopst", json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create"]}]), json!([])).await;
    create_flow(&client, &ns, "halted", json!({"serviceAccountName": "flow", "steps": [
        {"name": "gate", "type": "waitFor", "resource": {"kind": "ConfigMap", "name": "gate", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 300},
        {"name": "never", "type": "log", "message": "not reached"}
    ]})).await;
    let st = crate::common::wait_status(&client, &ns, "halted", 60, "running", |s| {
        s["steps"][0]["phase"] == "Running"
    })
    .await;
    let run = st["run"]["id"].as_str().unwrap().to_string();
    let api = flows(&client, &ns);
    api.patch(
        "halted",
        &Default::default(),
        &kube::api::Patch::Merge(
            json!({"metadata": {"annotations": {"ops.example.com/stop": run}}}),
        ),
    )
    .await
    .unwrap();
    let st = crate::common::wait_status(&client, &ns, "halted", 30, "Aborted", |s| {
        s["phase"] == "Aborted"
    })
    .await;
    assert_eq!(st["reason"], "Aborted", "{st:#}");
    assert_eq!(st["run"]["id"], run.as_str(), "{st:#}");
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("Aborted")),
        "{st:#}"
    );
    assert_eq!(st["steps"][0]["phase"], "Aborted", "{st:#}");
    assert!(
        st["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["name"] != "never" || s["phase"] == "Pending"),
        "{st:#}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = api.get("halted").await.unwrap().data["status"].clone();
    assert_eq!(
        (later["phase"].as_str(), later["run"]["id"].as_str()),
        (Some("Aborted"), Some(run.as_str())),
        "{later:#}"
    );
    ctl.abort();
}
