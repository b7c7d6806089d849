//! PseudoFlow under a real Argo CD (v3.6.1, host processes beside testenv; `make argocd` builds
//! it, and without it every test here fails naming that): Applications with automated sync,
//! prune and self-heal sync flows from a local git repository, with the chart's health check
//! and resource actions in `argocd-cm`. Health goes Progressing → Healthy on success and is
//! Degraded on failure; a flow in wave −1 holds a wave 0 object until it Succeeded, and so does
//! a re-run asked for in git; what the controller writes (status, finalizer) leaves the
//! Application Synced; pruning a flow runs its onDelete with its run state; the retry action
//! runs through argocd-server; the approve action through argocd-server approves nothing (Argo
//! CD's own identity may not approve: with the approval webhook the API server refuses its patch,
//! and the human who then approves is the one recorded); a bound flow's rollout shows Degraded,
//! Suspended or Progressing and its `rollout-*` actions need the `rollout` verb
//! (`gitops::rollout`). Prints the time from a git commit to the flow Succeeded.

use pseudoflow_test_support as common;
mod gitops;

use std::time::{Duration, Instant};

use common::admission::{
    editor_and_approver, kubectl_async, start_controller_with_key, start_webhooks,
};
use common::harness::{config_map, created, setup, wait_done};
use common::{flows, wait_status};
use gitops::{
    app_status, compared_again, create_app, flow, flow_health, refresh, resource, run_action,
    wait_app, wait_webhooks_active, Repo,
};
use pseudoflow_controller::approval::Key;
use serde_json::{json, Value};

fn make_cm(ns: &str, name: &str) -> Value {
    json!({"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: \"{name}\", namespace: {ns}}}\n")})
}

fn synced(status: &Value) -> bool {
    status["sync"]["status"] == "Synced"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_goes_progressing_then_healthy_and_what_the_controller_writes_stays_synced() {
    let (client, ns) = setup("argo-health").await;
    let repo = Repo::new(&ns);
    let spec = |secs: u32| {
        json!({"serviceAccountName": "flow", "steps": [{"type": "sleep", "seconds": secs}, make_cm(&ns, "done")],
               "onDelete": [{"type": "log", "message": "bye"}]})
    };
    repo.commit(
        &[("flow.yaml", flow(&ns, "chore", json!({}), spec(4)))],
        &[],
        "a flow",
    );
    create_app(&client, &ns, &repo, &ns).await;
    let mut healths = Vec::new();
    wait_app(
        &client,
        &ns,
        120,
        "the flow Healthy",
        |s| healths.push(flow_health(s, "chore")),
        |s| flow_health(s, "chore") == "Healthy",
    )
    .await;
    healths.dedup();
    let progressing = healths.iter().position(|h| h == "Progressing");
    assert!(
        progressing.is_some(),
        "Progressing before Healthy: {healths:?}"
    );
    let live = flows(&client, &ns).get("chore").await.unwrap();
    assert_eq!(live.data["status"]["phase"], "Succeeded");
    assert!(live
        .metadata
        .finalizers
        .unwrap_or_default()
        .contains(&"ops.example.com/on-delete".into()));
    // Status, finalizer and run state written: Argo CD compares again and still finds no diff.
    let after = compared_again(&client, &ns).await;
    assert!(
        synced(&after),
        "Synced after the controller wrote: {:#}",
        after["sync"]
    );
    let entry = resource(&after, "PseudoFlow", "chore").unwrap();
    assert_eq!(entry["status"], "Synced", "{entry:#}");
    // A change in git to the flow Succeeded through Argo CD: the figure docs/gitops.md gives.
    let generation = live.metadata.generation.unwrap();
    let t0 = repo.commit(
        &[("flow.yaml", flow(&ns, "chore", json!({}), spec(1)))],
        &[],
        "shorter",
    );
    refresh(&client, &ns).await;
    wait_status(
        &client,
        &ns,
        "chore",
        120,
        "the new generation Succeeded",
        |st| st["observedGeneration"].as_i64() > Some(generation) && st["phase"] == "Succeeded",
    )
    .await;
    let took = t0.elapsed();
    println!(
        "git commit to flow Succeeded through Argo CD (refresh asked, 1 s sleep step): {took:?}"
    );
    assert!(took < Duration::from_secs(120));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_flow_is_degraded_with_the_reason() {
    let (client, ns) = setup("argo-degraded").await;
    let repo = Repo::new(&ns);
    // The flow's identity may not create Secrets: the step fails with Forbidden.
    let secret = json!({"type": "apply", "manifests": format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: s, namespace: {ns}}}\n")});
    let spec = json!({"serviceAccountName": "flow", "steps": [secret]});
    repo.commit(
        &[("flow.yaml", flow(&ns, "broken", json!({}), spec))],
        &[],
        "a failing flow",
    );
    create_app(&client, &ns, &repo, &ns).await;
    let status = wait_app(
        &client,
        &ns,
        120,
        "the flow Degraded",
        |_| {},
        |s| flow_health(s, "broken") == "Degraded",
    )
    .await;
    let entry = resource(&status, "PseudoFlow", "broken").unwrap();
    let message = entry["health"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.steps[0]") || message.contains("orbidden"),
        "{entry:#}"
    );
}

/// Wave −1: a flow that makes ConfigMap `started`, then sleeps 4 s; wave 0: ConfigMap `next`.
fn waves(ns: &str, run: &str, next_rev: &str) -> [(&'static str, Value); 2] {
    let annotations = json!({"argocd.argoproj.io/sync-wave": "-1", "ops.example.com/run": run});
    let spec = json!({"serviceAccountName": "flow", "steps": [make_cm(ns, "started"), {"type": "sleep", "seconds": 4}]});
    let next = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "next", "namespace": ns, "annotations": {"argocd.argoproj.io/sync-wave": "0"}},
        "data": {"rev": next_rev}});
    [
        ("flow.yaml", flow(ns, "first", annotations, spec)),
        ("next.yaml", next),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_minus_one_flow_and_its_re_run_asked_in_git_hold_wave_zero_until_succeeded() {
    let rules = json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]},
        {"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["get"]},
    ]);
    let (client, ns) = common::prepare("argo-waves", rules, json!([])).await;
    let controller = common::start_controller(&client, &ns);
    let repo = Repo::new(&ns);
    repo.commit(&waves(&ns, "r1", "1"), &[], "a chore before the app");
    create_app(&client, &ns, &repo, &ns).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let next = loop {
        if let Some(cm) = config_map(&client, &ns, "next").await {
            break cm;
        }
        assert!(
            Instant::now() < deadline,
            "wave 0 never applied: {:#}",
            app_status(&client, &ns).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let started = config_map(&client, &ns, "started")
        .await
        .expect("the flow ran first");
    assert!(
        created(&next).as_second() >= created(&started).as_second() + 4,
        "wave 0 waited for the flow's 4 s after its first step: {} vs {}",
        created(&next),
        created(&started)
    );
    wait_done(&client, &ns, "first").await;
    // A re-run asked for in git: the same commit changes wave 0, applied only after the re-run,
    // even when the controller is slow to see it (stopped for 5 s here): the flow is
    // Progressing from the moment Argo CD applied the new ops.example.com/run, not only once
    // the controller started that run (without the health check's trigger comparison, wave 0
    // was applied meanwhile).
    controller.abort();
    repo.commit(&waves(&ns, "r2", "2"), &[], "run the chore again");
    refresh(&client, &ns).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let _controller = common::start_controller(&client, &ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let rev = config_map(&client, &ns, "next")
            .await
            .and_then(|c| c.data)
            .and_then(|d| d.get("rev").cloned());
        if rev.as_deref() == Some("2") {
            let st = flows(&client, &ns).get("first").await.unwrap().data["status"].clone();
            assert!(
                st["run"]["trigger"] == "r2" && st["phase"] == "Succeeded",
                "wave 0 waited for the re-run: {st:#}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "wave 0 never re-applied: {:#}",
            app_status(&client, &ns).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_a_flow_from_git_runs_its_on_delete_with_its_run_state() {
    let (client, ns) = setup("argo-prune").await;
    let repo = Repo::new(&ns);
    let stamp_cm = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: backup-taken, namespace: {ns}}}\ndata: {{at: \"${{stamp}}\"}}\n");
    let spec = json!({"serviceAccountName": "flow", "steps": [make_cm(&ns, "created")], "onDelete": [
        {"type": "exec", "cmd": "sleep 3; date +%s%N", "var": "stamp"},
        {"type": "apply", "manifests": stamp_cm}
    ]});
    let keep = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep", "namespace": ns}});
    repo.commit(
        &[
            ("flow.yaml", flow(&ns, "db", json!({}), spec)),
            ("keep.yaml", keep),
        ],
        &[],
        "a flow",
    );
    create_app(&client, &ns, &repo, &ns).await;
    wait_app(
        &client,
        &ns,
        120,
        "the flow Healthy",
        |_| {},
        |s| flow_health(s, "db") == "Healthy",
    )
    .await;
    repo.commit(&[], &["flow.yaml"], "prune the flow");
    refresh(&client, &ns).await;
    let deadline = Instant::now() + Duration::from_secs(180);
    while flows(&client, &ns).get_opt("db").await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "flow not pruned: {:#}",
            app_status(&client, &ns).await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let at = config_map(&client, &ns, "backup-taken")
        .await
        .and_then(|c| c.data)
        .and_then(|d| d.get("at").cloned());
    assert!(
        at.as_deref()
            .is_some_and(|a| a.len() > 10 && a.chars().all(|c| c.is_ascii_digit())),
        "the second onDelete step got the first one's output: {at:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_action_through_argocd_server_runs_the_flow_again_and_stays_synced() {
    let (client, ns) = setup("argo-retry").await;
    let repo = Repo::new(&ns);
    let spec = json!({"serviceAccountName": "flow", "steps": [make_cm(&ns, "done")]});
    repo.commit(
        &[("flow.yaml", flow(&ns, "chore", json!({}), spec))],
        &[],
        "a flow",
    );
    create_app(&client, &ns, &repo, &ns).await;
    wait_app(
        &client,
        &ns,
        120,
        "the flow Healthy",
        |_| {},
        |s| flow_health(s, "chore") == "Healthy",
    )
    .await;
    let first = wait_done(&client, &ns, "chore").await["run"]["id"].clone();
    let (ok, out) = run_action(&ns, "retry", "chore", &ns).await;
    assert!(ok, "argocd app actions run retry: {out}");
    let live = flows(&client, &ns).get("chore").await.unwrap();
    let asked = live.metadata.annotations.unwrap_or_default()["ops.example.com/run"].clone();
    assert!(asked.starts_with("argocd-"), "{asked}");
    let st = wait_status(&client, &ns, "chore", 90, "the re-run Succeeded", |st| {
        st["run"]["trigger"] == asked.as_str() && st["phase"] == "Succeeded"
    })
    .await;
    assert_ne!(st["run"]["id"], first, "a new run");
    let after = compared_again(&client, &ns).await;
    assert!(
        synced(&after),
        "the action's annotation is no diff: {:#}",
        after["sync"]
    );
    assert_eq!(flow_health(&after, "chore"), "Healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approve_action_through_argocd_server_approves_nothing_as_argo_cds_identity() {
    let (client, ns) = setup("argo-approve").await;
    let repo = Repo::new(&ns);
    let spec = json!({"serviceAccountName": "flow", "steps": [
        {"type": "log", "message": "before"},
        {"type": "approval", "name": "gate", "message": "check the canary"},
        make_cm(&ns, "after")]});
    repo.commit(
        &[("flow.yaml", flow(&ns, "gated", json!({}), spec))],
        &[],
        "a gated flow",
    );
    create_app(&client, &ns, &repo, &ns).await;
    wait_status(&client, &ns, "gated", 90, "waiting for approval", |st| {
        st["reason"] == "WaitingForApproval"
    })
    .await;
    let (ok, out) = run_action(&ns, "approve", "gated", &ns).await;
    println!("approve through Argo CD: ok={ok} {out}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let live = flows(&client, &ns).get("gated").await.unwrap();
    let annotations = live.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key("ops.example.com/approved-by"),
        "no stamp: {annotations:?}"
    );
    assert_eq!(
        live.data["status"]["reason"], "WaitingForApproval",
        "{:#}",
        live.data["status"]
    );
    assert!(
        config_map(&client, &ns, "after").await.is_none(),
        "the step after the gate did not run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_approval_webhook_argo_cds_approve_is_refused_and_the_human_approving_is_recorded()
{
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]);
    let (client, ns) = common::prepare("argo-approver", rules, json!([])).await;
    editor_and_approver(&client, &ns).await;
    let key = Key::random();
    let _controller = start_controller_with_key(&client, &ns, &key);
    let repo = Repo::new(&ns);
    let spec = json!({"serviceAccountName": "flow", "steps": [
        make_cm(&ns, "before"), {"type": "approval", "name": "gate", "message": "check the canary"}, make_cm(&ns, "after")]});
    repo.commit(
        &[("flow.yaml", flow(&ns, "gated", json!({}), spec))],
        &[],
        "a gated flow",
    );
    create_app(&client, &ns, &repo, &ns).await;
    wait_status(&client, &ns, "gated", 90, "waiting for approval", |st| {
        st["reason"] == "WaitingForApproval"
    })
    .await;
    start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns, "gated").await;
    // Argo CD patches as its own ServiceAccount, which may not approve: the API server refuses.
    let (ok, out) = run_action(&ns, "approve", "gated", &ns).await;
    assert!(
        !ok && out.contains("may not approve"),
        "refused through Argo CD: {out}"
    );
    assert!(
        config_map(&client, &ns, "after").await.is_none(),
        "the gate held"
    );
    // The human approves as themself; the record names them.
    let (ok, out) = kubectl_async(&[
        "annotate",
        "pf",
        "gated",
        "-n",
        &ns,
        "--overwrite",
        "--as=boss",
        "ops.example.com/approve=gate",
    ])
    .await;
    assert!(ok, "{out}");
    let st = wait_done(&client, &ns, "gated").await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let gate = st["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"] == "spec.steps[1]")
        .cloned()
        .unwrap_or_default();
    assert_eq!(gate["approval"]["user"], "boss", "{st:#}");
    // The approve annotation and the webhook's stamp are no diff either.
    let after = compared_again(&client, &ns).await;
    assert!(
        synced(&after),
        "Synced after the approval: {:#}",
        after["sync"]
    );
}
