//! A flow's life around its runs, on testenv: `onDelete` steps run behind a finalizer when the
//! flow is deleted (and a failing one keeps the flow, saying how to proceed), and node steps in a
//! namespace whose Pod Security level forbids privileged pods fail at once, naming that cause.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use pseudoflow_controller::flow::flow_resource;
use serde_json::json;

use crate::common::harness::{apply, config_map, create_flow, setup, setup_with, wait_done};
use crate::common::{delete_flow, jobs, wait_gone};

fn make_cm(ns: &str, name: &str) -> serde_json::Value {
    json!({"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: \"{name}\", namespace: {ns}}}\n")})
}

#[tokio::test]
async fn on_delete_steps_run_before_the_flow_goes() {
    let (client, ns) = setup("on-delete").await;
    create_flow(
        &client,
        &ns,
        "db",
        json!({"serviceAccountName": "flow", "steps": [make_cm(&ns, "created")], "onDelete": [make_cm(&ns, "backup-taken")]}),
    )
    .await;
    let status = wait_done(&client, &ns, "db").await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &flow_resource());
    let flow = flows.get("db").await.unwrap();
    assert!(
        flow.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"ops.example.com/on-delete".to_string()),
        "a flow with onDelete steps carries the finalizer"
    );
    assert!(config_map(&client, &ns, "backup-taken").await.is_none());
    // Gone only once its onDelete steps ran.
    delete_flow(&client, &ns, "db", &DeleteParams::default(), 60).await;
    assert!(
        config_map(&client, &ns, "backup-taken").await.is_some(),
        "the onDelete step ran before the flow was released"
    );
}

#[tokio::test]
async fn a_failing_on_delete_keeps_the_flow_and_says_what_to_do() {
    let (client, ns) = setup("on-delete-fail").await;
    // The flow's identity may not create Secrets: the onDelete step fails with Forbidden.
    create_flow(
        &client,
        &ns,
        "keep",
        json!({"serviceAccountName": "flow", "steps": [make_cm(&ns, "x")], "onDelete": [
            {"type": "apply", "manifests": format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: s, namespace: {ns}}}\n")}
        ]}),
    )
    .await;
    wait_done(&client, &ns, "keep").await;
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &flow_resource());
    flows
        .delete("keep", &DeleteParams::default())
        .await
        .unwrap();
    let failed = |o: Option<&DynamicObject>| {
        o.is_some_and(|f| {
            f.data["status"]["phase"] == "Failed"
                && f.data["status"]["steps"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s["path"] == "spec.onDelete[0]"))
        })
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(flows.clone(), "keep", failed),
    )
    .await
    .expect("the onDelete run fails")
    .unwrap();
    let events = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let hint = events
        .items
        .iter()
        .filter_map(|e| e.message.clone())
        .find(|m| m.contains("onDelete steps succeed"))
        .expect("an Event says why the flow stays");
    assert!(
        hint.contains("ops.example.com/on-delete") && hint.contains("forbidden"),
        "{hint}"
    );
    let still = flows.get("keep").await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());
    // Removing the finalizer by hand, as the message says, lets it go.
    flows
        .patch(
            "keep",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    wait_gone(&client, &ns, "keep", &still.metadata.uid.unwrap(), 30).await;
}

#[tokio::test]
async fn node_steps_in_a_baseline_namespace_fail_naming_pod_security() {
    let (client, ns) = setup_with(
        "pod-security",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]),
    )
    .await;
    // Listing nodes needs a cluster-wide right.
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": format!("{ns}-view-nodes")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-reader-for-tests"},
        "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]})).await;
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:node-reader-for-tests"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})).await;
    create_flow(
        &client,
        &ns,
        "restart",
        json!({"serviceAccountName": "flow", "steps": [
            make_cm(&ns, "api-steps-still-run"),
            {"type": "execNode", "nodeSelector": "", "cmd": "systemctl restart kubelet"},
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "restart").await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("spec.steps[1]")
            && message.contains("Pod Security level \"baseline\"")
            && message.contains("pod-security.kubernetes.io/enforce=privileged"),
        "{message}"
    );
    assert!(
        config_map(&client, &ns, "api-steps-still-run")
            .await
            .is_some(),
        "API steps (restricted pods) still run under baseline"
    );
    let node_jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|j| {
            j.spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .is_some_and(|p| p.node_name.is_some())
        })
        .count();
    assert_eq!(node_jobs, 0, "no node-pinned Job is created");
}

#[tokio::test]
async fn forbid_finishes_the_running_run_with_its_spec_before_the_edited_one() {
    let (client, ns) = setup("forbid-edit").await;
    let spec = |v: &str| {
        json!({"serviceAccountName": "flow", "options": {"concurrencyPolicy": "Forbid"}, "vars": {"v": v}, "steps": [
            {"type": "sleep", "seconds": 4},
            make_cm(&ns, "made-${v}"),
        ]})
    };
    create_flow(&client, &ns, "edited", spec("one")).await;
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &flow_resource());
    let running =
        |o: Option<&DynamicObject>| o.is_some_and(|f| f.data["status"]["phase"] == "Running");
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(flows.clone(), "edited", running),
    )
    .await
    .unwrap()
    .unwrap();
    // Edit the spec mid-run: a new generation, queued behind the running run.
    create_flow(&client, &ns, "edited", spec("two")).await;
    let queued = |o: Option<&DynamicObject>| {
        o.is_some_and(|f| f.data["status"]["queuedRun"]["generation"] == json!(2))
    };
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(flows.clone(), "edited", queued),
    )
    .await
    .expect("status says the edited spec is queued")
    .unwrap();
    let second_done = |o: Option<&DynamicObject>| {
        o.is_some_and(|f| {
            f.data["status"]["observedGeneration"] == json!(2)
                && f.data["status"]["phase"] == "Succeeded"
        })
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(flows, "edited", second_done),
    )
    .await
    .expect("the edited spec runs after the first run")
    .unwrap();
    let one = config_map(&client, &ns, "made-one")
        .await
        .expect("the running run finished with the spec it started with");
    let two = config_map(&client, &ns, "made-two")
        .await
        .expect("then the edited spec ran");
    assert!(crate::common::harness::created(&one) <= crate::common::harness::created(&two));
}

#[tokio::test]
async fn a_flow_created_again_under_the_same_name_runs_anew() {
    let (client, ns) = setup("reborn").await;
    let spec = json!({"serviceAccountName": "flow", "steps": [
        {"type": "exec", "cmd": "date +%s%N", "var": "stamp"},
        {"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: stamp, namespace: {ns}}}\ndata: {{at: \"${{stamp}}\"}}\n")}
    ]});
    create_flow(&client, &ns, "reborn", spec.clone()).await;
    assert_eq!(
        wait_done(&client, &ns, "reborn").await["phase"],
        "Succeeded"
    );
    let stamp = |cm: Option<k8s_openapi::api::core::v1::ConfigMap>| {
        cm.and_then(|c| c.data).and_then(|d| d.get("at").cloned())
    };
    let first = stamp(config_map(&client, &ns, "stamp").await).unwrap();

    // Deleted with its Jobs and run state orphaned: they stay, as they may for a while when
    // garbage collection lags. The new flow object must not take them for its own.
    delete_flow(&client, &ns, "reborn", &DeleteParams::orphan(), 30).await;
    let leftovers = jobs(&client, &ns).await.len();
    assert_eq!(leftovers, 2, "the old flow's Jobs are still there");

    create_flow(&client, &ns, "reborn", spec).await;
    let status = wait_done(&client, &ns, "reborn").await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let second = stamp(config_map(&client, &ns, "stamp").await).unwrap();
    assert_ne!(first, second, "the steps ran again for the new flow");
    assert_eq!(
        jobs(&client, &ns).await.len(),
        4,
        "two Jobs of its own beside the two left over"
    );
}

/// Argo CD v3 prunes with foreground propagation: the garbage collector deletes the flow's
/// dependents (its run-state Secret, its Jobs) first, while the `on-delete` finalizer still holds
/// the flow. Its onDelete steps must still run with their run state: an exec output carried from
/// one onDelete step to the next, no step failing on a vanished Job, the flow then released. The
/// first step outlasts the garbage collector's discovery resync (30 s), so it does act meanwhile.
#[tokio::test]
async fn foreground_deletion_still_runs_on_delete_with_its_run_state() {
    let (client, ns) = setup("on-delete-fg").await;
    let stamp_cm = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: backup-taken, namespace: {ns}}}\ndata: {{at: \"${{stamp}}\"}}\n");
    create_flow(
        &client,
        &ns,
        "db",
        json!({"serviceAccountName": "flow", "steps": [make_cm(&ns, "created")], "onDelete": [
            {"type": "exec", "cmd": "sleep 35; date +%s%N", "var": "stamp"},
            {"type": "apply", "manifests": stamp_cm}
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "db").await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &flow_resource());
    // Every status the flow shows until it is gone: the last is the onDelete run's.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let watcher = {
        let (flows, seen) = (flows.clone(), seen.clone());
        tokio::spawn(async move {
            use futures::StreamExt;
            let stream = kube::runtime::watcher(
                flows,
                kube::runtime::watcher::Config::default().fields("metadata.name=db"),
            );
            let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(stream));
            while let Some(Ok(f)) = stream.next().await {
                seen.lock().unwrap().push(f.data["status"].clone());
            }
        })
    };
    delete_flow(&client, &ns, "db", &DeleteParams::foreground(), 150).await;
    watcher.abort();
    let cm = config_map(&client, &ns, "backup-taken").await;
    let at = cm.and_then(|c| c.data).and_then(|d| d.get("at").cloned());
    assert!(
        at.as_deref()
            .is_some_and(|a| a.len() > 10 && a.chars().all(|c| c.is_ascii_digit())),
        "the second onDelete step got the first one's output: {at:?}"
    );
    let last = seen.lock().unwrap().last().cloned().unwrap_or_default();
    assert!(
        last["run"]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with('d'))
            && last["phase"] == "Succeeded",
        "the onDelete run succeeded: {last:#}"
    );
    let events = Api::<Event>::namespaced(client.clone(), &ns)
        .list(
            &ListParams::default()
                .fields("involvedObject.kind=PseudoFlow,involvedObject.name=db,type=Warning"),
        )
        .await
        .unwrap();
    let warnings: Vec<_> = events
        .items
        .iter()
        .filter_map(|e| e.message.clone())
        .collect();
    assert!(
        warnings.is_empty(),
        "no step failed or state was refused: {warnings:?}"
    );
}
