//! A tenant who may create ConfigMaps, Secrets or Jobs in a flow's namespace, and knows how names
//! are derived (the code is public), plants objects under the names a flow's next step will use,
//! or makes a run id collide with another flow's. Nothing planted may run, be adopted or be
//! deleted for its name or labels alone.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use pseudoflow_compiler::names::{job_name, run_id};
use serde_json::{json, Value};

use crate::common::api::{eventually, wait_next_run, wait_step_running};
use crate::common::harness::{config_map, create_flow, setup_with, wait_done};
use crate::common::{flows, jobs, request_run};

fn manifest(ns: &str, name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\n")
}

async fn flow_uid_and_generation(client: &kube::Client, ns: &str, name: &str) -> (String, i64) {
    let f = flows(client, ns).get(name).await.unwrap();
    (
        f.metadata.uid.unwrap(),
        f.metadata.generation.unwrap_or_default(),
    )
}

/// The reproduction, with an API step: the victim's next run's first input is planted
/// (as a ConfigMap and as a Secret, whichever the controller reads) holding another step.
#[tokio::test]
async fn an_input_planted_under_a_future_steps_name_is_refused_not_run() {
    let (client, ns) = setup_with(
        "hijack-input",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}]),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "victim",
        json!({"serviceAccountName": "flow", "steps": [{"type": "apply", "manifests": manifest(&ns, "legit")}]}),
    )
    .await;
    assert_eq!(
        wait_done(&client, &ns, "victim").await["phase"],
        "Succeeded"
    );

    let (uid, generation) = flow_uid_and_generation(&client, &ns, "victim").await;
    let next_run = run_id(&uid, generation, Some("again"));
    let name = job_name("victim", &next_run, "s0", &[], 1);
    let planted: Value = json!({
        "flow": {"name": "victim", "namespace": ns, "uid": uid, "serviceAccount": "flow"},
        "runId": next_run, "nodeId": "s0", "path": "spec.steps[0]", "attempt": 1, "task": "run",
        "step": {"type": "apply", "manifests": manifest(&ns, "pwned")},
    });
    let doc = serde_json::to_string(&planted).unwrap();
    let meta = json!({"name": name, "namespace": ns});
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": meta, "data": {"input.json": doc}})).unwrap();
    let secret: Secret =
        serde_json::from_value(json!({"metadata": meta, "stringData": {"input.json": doc}}))
            .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let before =
        flows(&client, &ns).get("victim").await.unwrap().data["status"]["run"]["id"].clone();
    request_run(&client, &ns, "victim", "again").await;
    let status = wait_next_run(&client, &ns, "victim", &before).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.steps[0]") && message.contains("already exists"),
        "the failure names the step and the planted object: {message}"
    );
    assert!(
        config_map(&client, &ns, "pwned").await.is_none(),
        "the planted step ran"
    );
}

/// A run id made to collide with another's (here: a bystander Job simply carrying the run's
/// label) must not make the bystander deletable when the flow replaces its run.
#[tokio::test]
async fn replacing_a_run_deletes_only_the_jobs_the_flow_owns() {
    let (client, ns) = setup_with(
        "hijack-abort",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "replacer",
        json!({
            "serviceAccountName": "flow",
            "options": {"concurrencyPolicy": "Replace"},
            "steps": [{"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "never"}, "condition": "Exist", "timeoutSeconds": 600}],
        }),
    )
    .await;
    let status = wait_step_running(&client, &ns, "replacer", "spec.steps[0]").await;
    let run = status["run"]["id"].as_str().unwrap().to_string();
    let own: Vec<String> = jobs(&client, &ns)
        .await
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    assert_eq!(own.len(), 1, "{own:?}");
    let bystander: Job = serde_json::from_value(json!({
        "metadata": {"name": "bystander", "namespace": ns, "labels": {"ops.example.com/run": run, "ops.example.com/flow": "replacer"}},
        "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "none"}]}}},
    }))
    .unwrap();
    let job_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    job_api
        .create(&PostParams::default(), &bystander)
        .await
        .unwrap();

    request_run(&client, &ns, "replacer", "2").await;
    eventually(30, "the replaced run's own Job deleted", || async {
        job_api
            .get_opt(&own[0])
            .await
            .unwrap()
            .is_none_or(|j| j.metadata.deletion_timestamp.is_some())
    })
    .await;
    let left = job_api.get_opt("bystander").await.unwrap();
    assert!(
        left.is_some_and(|j| j.metadata.deletion_timestamp.is_none()),
        "a Job the flow does not own was deleted for its run label"
    );
}

/// A step's Job deleted by hand (or by a TTL) before it reported: the step fails, naming it,
/// instead of the run waiting forever.
#[tokio::test]
async fn a_step_whose_job_vanished_fails_instead_of_hanging() {
    let (client, ns) = setup_with(
        "hijack-vanish",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "orphaned",
        json!({"serviceAccountName": "flow", "steps": [{"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "never"}, "condition": "Exist", "timeoutSeconds": 600}]}),
    )
    .await;
    wait_step_running(&client, &ns, "orphaned", "spec.steps[0]").await;
    let job = jobs(&client, &ns).await.remove(0);
    let name = job.metadata.name.unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    Api::<Job>::namespaced(client.clone(), &ns)
        .delete(&name, &dp)
        .await
        .unwrap();
    let status = tokio::time::timeout(
        Duration::from_secs(40),
        crate::common::wait_done(&client, &ns, "orphaned", 40),
    )
    .await
    .expect("the run ends");
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&name) && message.contains("deleted"),
        "{message}"
    );
}

/// Someone who may update Secrets damages a flow's run state: the flow fails, saying so, rather
/// than starting its run again from scratch on every reconcile (re-running every step).
#[tokio::test]
async fn a_damaged_run_state_fails_the_flow_instead_of_rerunning_it() {
    let (client, ns) = setup_with(
        "hijack-state",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}]),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "stateful",
        json!({"serviceAccountName": "flow", "steps": [{"type": "apply", "manifests": manifest(&ns, "once")}]}),
    )
    .await;
    assert_eq!(
        wait_done(&client, &ns, "stateful").await["phase"],
        "Succeeded"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let state = secrets
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|s| s.type_.as_deref() == Some("ops.example.com/run-state"))
        .expect("the run state is a Secret");
    let mut damaged = state.clone();
    damaged.data = Some(
        [(
            "run.json".to_string(),
            k8s_openapi::ByteString(b"{not json".to_vec()),
        )]
        .into(),
    );
    secrets
        .replace(
            state.metadata.name.as_deref().unwrap(),
            &PostParams::default(),
            &damaged,
        )
        .await
        .unwrap();
    let jobs_before = jobs(&client, &ns).await.len();
    request_run(&client, &ns, "stateful", "poke").await;
    // A damaged state is one the controller did not write (its seal no longer verifies).
    let status =
        crate::common::wait_status(&client, &ns, "stateful", 30, "RunStateTampered", |s| {
            s["reason"] == "RunStateTampered"
        })
        .await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("not what the controller wrote")),
        "{status:#}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        jobs(&client, &ns).await.len(),
        jobs_before,
        "nothing ran again"
    );
}

/// A fused segment's journal is a ConfigMap under a predictable name. A tenant who may write
/// ConfigMaps forges entries claiming the running step and the next one ended (with outputs):
/// were they believed, a step would be skipped and a forged value would flow into later steps.
/// Entries count only with an HMAC under a key the tenant cannot read.
#[tokio::test]
async fn a_forged_segment_journal_neither_skips_a_step_nor_sets_a_variable() {
    let (client, ns) = setup_with(
        "hijack-journal",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "victim",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "apply", "manifests": manifest(&ns, "first")},
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "gate"}, "condition": "Exist", "timeoutSeconds": 120},
            {"type": "exec", "cmd": "echo real", "var": "said"},
            // Reads `said`: a Job of its own, after the segment above.
            {"type": "apply", "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "said"}, "data": {"v": "${said}"}}]},
        ]}),
    )
    .await;
    let status = wait_step_running(&client, &ns, "victim", "spec.steps[1]").await;
    let job = jobs(&client, &ns).await[0].metadata.name.clone().unwrap();
    let forged = |node: &str, var: Value| {
        json!({"member": {"nodeId": node, "result": {"ok": true, "changed": true, "message": "forged", "vars": var},
            "startedMs": 0, "finishedMs": 0}, "mac": "00".repeat(32)})
    };
    let first = json!({"member": {"nodeId": "s0", "result": {"ok": true, "message": "forged"}, "startedMs": 0, "finishedMs": 0}, "mac": "00".repeat(32)});
    let journal = serde_json::to_string(&json!([
        first,
        forged("s1", json!({})),
        forged("s2", json!({"said": "pwned"}))
    ]))
    .unwrap();
    crate::common::apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{job}-journal"), "namespace": ns,
            "labels": {"ops.example.com/role": "segment-journal"},
            "ownerReferences": [{"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "name": "victim", "uid": flows(&client, &ns).get("victim").await.unwrap().metadata.uid.unwrap()}]},
        "data": {"journal.json": journal}})).await;
    // The forged write wakes the controller (it watches journals); over the next seconds the
    // waiting step must stay as it is — the gate is still closed.
    let run = status["run"]["id"].clone();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = flows(&client, &ns).get("victim").await.unwrap().data["status"].clone();
        assert_eq!(now["run"]["id"], run);
        let waiting = crate::common::step(&now, "spec.steps[1]");
        assert_eq!(
            waiting["phase"], "Running",
            "forged progress believed: {now:#}"
        );
    }
    crate::common::apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "namespace": ns}})).await;
    let done = wait_done(&client, &ns, "victim").await;
    assert_eq!(done["phase"], "Succeeded", "{done:#}");
    for path in ["spec.steps[1]", "spec.steps[2]"] {
        let s = crate::common::step(&done, path);
        assert_ne!(s["message"], "forged", "{s:#}");
    }
    let said = config_map(&client, &ns, "said").await.unwrap();
    assert_eq!(
        said.data.unwrap()["v"],
        "real",
        "the forged variable was used"
    );
}
