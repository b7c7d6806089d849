//! A bound flow's rollout through the real Argo CD: the health it shows for each rollout phase
//! (written into status here, with no controller, so every phase can be shown), and the
//! `rollout-*` resource actions through argocd-server, which patch as Argo CD's identity: refused
//! by the webhook while that identity lacks the `rollout` verb, stamped naming it once it has it.

use kube::api::{Patch, PatchParams};
use kube::Client;
use pseudoflow_controller::approval::Key;
use pseudoflow_controller::rollout_by::RolloutStamp;
use pseudoflow_crd::rollout::RolloutAction;
use pseudoflow_testenv::argocd;
use serde_json::{json, Value};

use super::{
    compared_again, create_app, flow, flow_health, run_action, wait_app, wait_webhooks_active, Repo,
};
use crate::common::admission::{editor_and_approver, start_webhooks};
use crate::common::{apply, flows};

/// The revision the test's status says is rolling out.
const REVISION: &str = "widgets-2b";

/// Writes a rollout in `phase` as flow `widgets`' `status.bound.rollout`.
async fn rollout_at(client: &Client, ns: &str, phase: &str) {
    let status = json!({"status": {"observedGeneration": 1, "phase": "Succeeded",
        "reason": "Bound", "message": "3 Widget object(s)", "bound": {
        "objects": 3, "creating": 0, "running": 3, "failed": 0,
        "rollout": {"revision": REVISION, "from": "widgets-1a", "phase": phase, "wave": 1,
            "waves": 2, "target": 1, "updated": 1, "failedObjects": [format!("{ns}/w-1")]}}}});
    flows(client, ns)
        .patch_status("widgets", &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

/// Waits until Argo CD shows flow `widgets` with `health`; the Application's status.
async fn health_is(client: &Client, ns: &str, health: &'static str) -> Value {
    wait_app(
        client,
        ns,
        60,
        health,
        |_| {},
        |st| flow_health(st, "widgets") == health,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_is_degraded_suspended_or_progressing_and_its_actions_need_the_rollout_verb() {
    let (client, ns) = crate::common::prepare("argo-rollout", json!([]), json!([])).await;
    editor_and_approver(&client, &ns).await;
    let repo = Repo::new(&ns);
    let spec = json!({"serviceAccountName": "flow",
        "bind": {"apiVersion": "example.com/v1", "kind": "Widget"},
        "steps": [{"type": "log", "message": "served"}]});
    repo.commit(
        &[("flow.yaml", flow(&ns, "widgets", json!({}), spec))],
        &[],
        "a bound flow",
    );
    create_app(&client, &ns, &repo, &ns).await;
    wait_app(
        &client,
        &ns,
        90,
        "the flow synced",
        |_| {},
        |st| st["sync"]["status"] == "Synced" && !flow_health(st, "widgets").is_empty(),
    )
    .await;

    // Health, as the chart's health.lua says for each phase.
    rollout_at(&client, &ns, "Stopped").await;
    let st = health_is(&client, &ns, "Degraded").await;
    let message = super::resource(&st, "PseudoFlow", "widgets").unwrap()["health"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains(&format!(
            "Rollout of revision {REVISION} stopped, failed: {ns}/w-1"
        )),
        "{message}"
    );
    rollout_at(&client, &ns, "Paused").await;
    health_is(&client, &ns, "Suspended").await;
    rollout_at(&client, &ns, "Progressing").await;
    health_is(&client, &ns, "Progressing").await;

    // Argo CD patches as its own identity, which may not `rollout`: refused, naming the verb.
    let argo = format!(
        "system:serviceaccount:{}:{}",
        argocd::NAMESPACE,
        argocd::IDENTITY
    );
    let key = Key::random();
    start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns, "widgets").await;
    let (ok, out) = run_action(&ns, "rollout-pause", "widgets", &ns).await;
    assert!(
        !ok && out.contains(&format!("{argo} may not pause the rollout"))
            && out.contains("verb on pseudoflows.ops.example.com"),
        "refused through Argo CD: {out}"
    );
    // Given the verb, the same identity's action is stamped naming it and the revision.
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "argocd-rollout", "namespace": ns},
        "rules": [{"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["rollout"]}]}))
    .await;
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "argocd-rollout", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "argocd-rollout"},
        "subjects": [{"kind": "ServiceAccount", "name": argocd::IDENTITY, "namespace": argocd::NAMESPACE}]}))
    .await;
    let (ok, out) = run_action(&ns, "rollout-promote", "widgets", &ns).await;
    assert!(ok, "argocd app actions run rollout-promote: {out}");
    let f = flows(&client, &ns).get("widgets").await.unwrap();
    let ann = f.metadata.annotations.unwrap_or_default();
    assert_eq!(ann["ops.example.com/rollout"], "promote");
    let stamp = RolloutStamp::verify(&key, &ns, "widgets", &ann["ops.example.com/rollout-by"])
        .expect("the webhook's stamp");
    assert_eq!(
        (stamp.action, stamp.user.as_str(), stamp.revision.as_str()),
        (RolloutAction::Promote, argo.as_str(), REVISION)
    );
    // What the action wrote is no diff.
    let after = compared_again(&client, &ns).await;
    assert_eq!(after["sync"]["status"], "Synced", "{:#}", after["sync"]);
}
