//! The reject, retry-from-failed, suspend, resume and stop resource actions run through the real
//! argocd-server (`argocd app actions run`), each with its effect on the flow checked on the
//! cluster: what ran is counted by the ConfigMaps the steps create, not read from status only.
//! (Approve and retry are in `argocd.rs`.)

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::Client;
use pseudoflow_controller::approval::Key;
use serde_json::{json, Value};

use super::{
    approver_project, compared_again, create_app, create_app_in, flow, flow_health, run_action,
    wait_app, wait_webhooks_active, Repo, APPROVER,
};
use crate::common::admission::{editor_and_approver, start_controller_with_key, start_webhooks};
use crate::common::api::wait_step_running;
use crate::common::harness::{config_map, setup, wait_done};
use crate::common::{apply, flows, step, wait_status};

/// An exec step named `name` that records each of its runs as a ConfigMap `<name>-<n>`, then
/// runs `then`.
fn counted(name: &str, then: &str) -> Value {
    json!({"type": "exec", "name": name, "cmd": format!(
        "n=$(kubectl get configmaps -o name | grep -c /{name}-); kubectl create configmap {name}-$n >/dev/null; {then}"
    )})
}

/// How many times step `name` of [`counted`] ran.
async fn runs_of(client: &Client, ns: &str, name: &str) -> usize {
    let all = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    all.items
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .filter_map(|n| n.strip_prefix(&format!("{name}-")))
        .filter(|n| n.parse::<u32>().is_ok())
        .count()
}

/// Commits flow `name` with `steps` to a new repository and has Application `ns` (in `project`)
/// sync it into `ns`.
async fn synced_flow(client: &Client, ns: &str, project: &str, name: &str, steps: Value) {
    let repo = Repo::new(ns);
    let spec = json!({"serviceAccountName": "flow", "steps": steps});
    repo.commit(
        &[("flow.yaml", flow(ns, name, json!({}), spec))],
        &[],
        "a flow",
    );
    if project == "default" {
        create_app(client, ns, &repo, ns).await;
    } else {
        create_app_in(client, project, ns, &repo, ns).await;
    }
}

/// The Application of `ns` still Synced after Argo CD compared it again; its status.
async fn still_synced(client: &Client, ns: &str) -> Value {
    let after = compared_again(client, ns).await;
    assert_eq!(
        after["sync"]["status"], "Synced",
        "what the action wrote is no diff: {:#}",
        after["sync"]
    );
    after
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reject_action_with_one_click_approvals_fails_the_run_at_the_gate_naming_who() {
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}]);
    let (client, ns) = crate::common::prepare("argo-reject", rules, json!([])).await;
    editor_and_approver(&client, &ns).await;
    let key = Key::random();
    let _controller = start_controller_with_key(&client, &ns, &key);
    let project = approver_project(&client, &ns).await;
    let steps = json!([{"type": "log", "message": "before"},
        {"type": "approval", "name": "gate", "message": "check the canary"}, crate::make_cm(&ns, "after")]);
    synced_flow(&client, &ns, &project, "gated", steps).await;
    wait_status(&client, &ns, "gated", 90, "waiting for approval", |st| {
        st["reason"] == "WaitingForApproval"
    })
    .await;
    start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns, "gated").await;
    let (ok, out) = run_action(&ns, "reject", "gated", &ns).await;
    assert!(ok, "argocd app actions run reject: {out}");
    let st = wait_done(&client, &ns, "gated").await;
    let who = format!("system:serviceaccount:{ns}:{APPROVER}");
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert!(
        st["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("rejected by {who}"))),
        "the run fails naming the rejection: {st:#}"
    );
    let gate = step(&st, "spec.steps[1]");
    assert_eq!(gate["phase"], "Failed", "{st:#}");
    assert_eq!(gate["approval"]["decision"], "Rejected", "{st:#}");
    assert_eq!(gate["approval"]["user"], who.as_str(), "{st:#}");
    assert!(
        config_map(&client, &ns, "after").await.is_none(),
        "the step after the gate never ran"
    );
    let after = still_synced(&client, &ns).await;
    assert_eq!(flow_health(&after, "gated"), "Degraded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_from_failed_action_resumes_at_the_failed_step_without_re_running_earlier_ones() {
    let (client, ns) = setup("argo-retry-from").await;
    let steps = json!([
        counted("prepare", "true"),
        counted("gate", "kubectl get configmap gate >/dev/null"),
        counted("finish", "true")
    ]);
    synced_flow(&client, &ns, "default", "deploy", steps).await;
    wait_app(
        &client,
        &ns,
        120,
        "the flow Degraded",
        |_| {},
        |s| flow_health(s, "deploy") == "Degraded",
    )
    .await;
    let failed = wait_done(&client, &ns, "deploy").await;
    assert_eq!(
        step(&failed, "spec.steps[1]")["phase"],
        "Failed",
        "{failed:#}"
    );
    let failed_run = failed["run"]["id"].as_str().unwrap().to_string();
    // The step's cause fixed, the failed run retried from Argo CD.
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "namespace": ns}})).await;
    let (ok, out) = run_action(&ns, "retry-from-failed", "deploy", &ns).await;
    assert!(ok, "argocd app actions run retry-from-failed: {out}");
    let retried = wait_status(&client, &ns, "deploy", 120, "the retry Succeeded", |st| {
        st["run"]["retryOf"] == failed_run.as_str() && st["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(retried["run"]["retriedFrom"], "gate", "{retried:#}");
    let ran = (
        runs_of(&client, &ns, "prepare").await,
        runs_of(&client, &ns, "gate").await,
        runs_of(&client, &ns, "finish").await,
    );
    assert_eq!(
        ran,
        (1, 2, 1),
        "prepare not re-run, gate again, finish once"
    );
    let after = still_synced(&client, &ns).await;
    assert_eq!(flow_health(&after, "deploy"), "Healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suspend_action_holds_the_run_and_resume_continues_it_to_succeeded() {
    let (client, ns) = setup("argo-suspend").await;
    // `second` reads `first`'s output, so the two are separate Jobs: suspend holds between Jobs.
    let mut first = counted(
        "first",
        "until kubectl get configmap release >/dev/null 2>&1; do sleep 0.2; done; echo yes",
    );
    first["var"] = json!("released");
    let steps = json!([first, counted("second", "test ${released} = yes")]);
    synced_flow(&client, &ns, "default", "held", steps).await;
    let running = wait_step_running(&client, &ns, "held", "spec.steps[0]").await;
    let run = running["run"]["id"].clone();
    let (ok, out) = run_action(&ns, "suspend", "held", &ns).await;
    assert!(ok, "argocd app actions run suspend: {out}");
    wait_status(&client, &ns, "held", 30, "reason Suspended", |st| {
        st["reason"] == "Suspended"
    })
    .await;
    // The running step finishes; no new step starts while suspended.
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "release", "namespace": ns}})).await;
    wait_status(&client, &ns, "held", 60, "the first step done", |st| {
        step(st, "spec.steps[0]")["phase"] == "Succeeded"
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let after = still_synced(&client, &ns).await;
    assert_eq!(flow_health(&after, "held"), "Progressing");
    let held = flows(&client, &ns).get("held").await.unwrap().data;
    assert_eq!(held["spec"]["suspend"], true, "self-heal kept the suspend");
    let st = &held["status"];
    assert_eq!(
        (&st["phase"], &st["reason"]),
        (&json!("Running"), &json!("Suspended")),
        "{st:#}"
    );
    assert_eq!(
        runs_of(&client, &ns, "second").await,
        0,
        "nothing new started: {st:#}"
    );
    // Resume: the same run goes on to Succeeded.
    let (ok, out) = run_action(&ns, "resume", "held", &ns).await;
    assert!(ok, "argocd app actions run resume: {out}");
    let done = wait_done(&client, &ns, "held").await;
    assert_eq!(done["phase"], "Succeeded", "{done:#}");
    assert_eq!(done["run"]["id"], run, "resume is not a new run: {done:#}");
    let ran = (
        runs_of(&client, &ns, "first").await,
        runs_of(&client, &ns, "second").await,
    );
    assert_eq!(ran, (1, 1));
    let after = still_synced(&client, &ns).await;
    assert_eq!(flow_health(&after, "held"), "Healthy");
}

/// The stop action, through argocd-server as a person clicks it: the running run ends now
/// (`Aborted`, its sleep cut short), no later step starts, the Application stays Synced (the
/// annotation it writes is no diff) and the flow's health is Degraded, as for a failed run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_action_aborts_the_running_run_and_nothing_after_it_starts() {
    let (client, ns) = setup("argo-stop").await;
    let steps = json!([{"type": "sleep", "name": "a long wait", "seconds": 600},
        counted("after", "true")]);
    synced_flow(&client, &ns, "default", "long", steps).await;
    let running = wait_step_running(&client, &ns, "long", "spec.steps[0]").await;
    let run = running["run"]["id"].clone();
    let (ok, out) = run_action(&ns, "stop", "long", &ns).await;
    assert!(ok, "argocd app actions run stop: {out}");
    let st = wait_status(&client, &ns, "long", 30, "Aborted", |st| {
        st["phase"] == "Aborted"
    })
    .await;
    assert_eq!(st["run"]["id"], run, "the running run was stopped: {st:#}");
    assert_eq!(st["reason"], "Aborted", "{st:#}");
    assert!(
        st["message"]
            .as_str()
            .unwrap_or_default()
            .contains("stopped "),
        "{st:#}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        runs_of(&client, &ns, "after").await,
        0,
        "nothing after it started"
    );
    let after = still_synced(&client, &ns).await;
    assert_eq!(flow_health(&after, "long"), "Degraded");
}
