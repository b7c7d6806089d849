//! `ops.example.com/rollout` (what `kubectl pf rollout pause|resume|promote|undo` sets) through
//! testenv's real kube-apiserver and both webhooks: a user who may edit the flow but not
//! `rollout` it is refused, naming the verb; a user with the verb gets a stamp naming them and
//! the revision status showed, which the controller's `control::accepted` accepts for that
//! revision only; a stamp a client writes is refused, whoever writes it, or overwritten when sent
//! with an action; and one written past the webhook does not verify.

use crate::common::admission::{editor_and_approver, kubectl_async, start_webhooks};
use crate::common::approval::*;
use crate::common::*;
use kube::api::{Patch, PatchParams};
use pseudoflow_controller::approval::Key;
use pseudoflow_controller::bind::rollout::control;
use pseudoflow_controller::rollout_by::RolloutStamp;
use pseudoflow_crd::rollout::RolloutAction;
use serde_json::json;

/// The revision the test's status says is rolling out.
const REVISION: &str = "gated-6f1c0e9a";

/// The flow's annotations now.
async fn annotations(
    client: &kube::Client,
    ns: &str,
) -> std::collections::BTreeMap<String, String> {
    let f = flows(client, ns).get("gated").await.unwrap();
    f.metadata.annotations.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_user_who_may_rollout_acts_on_a_rollout_and_the_stamp_names_them_and_the_revision() {
    let (client, ns) = prepare("rollout-by", json!([]), json!([])).await;
    editor_and_approver(&client, &ns).await;
    // `boss` may also `rollout`; `tenant` may edit the flow (and `approve` is not `rollout`).
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "flow-roller", "namespace": ns},
        "rules": [{"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["rollout"]}]}))
    .await;
    apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "rollers", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flow-roller"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "boss"}]}),
    )
    .await;
    // A bound flow whose rollout status is written here (no controller: nothing else writes it).
    create_flow(
        &client,
        &ns,
        "gated",
        json!({"serviceAccountName": "flow",
        "bind": {"apiVersion": "example.com/v1", "kind": "Widget"},
        "steps": [{"type": "log", "message": "served"}]}),
    )
    .await;
    flows(&client, &ns)
        .patch_status(
            "gated",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running", "bound": {
                "objects": 3, "creating": 1, "running": 2, "failed": 0,
                "rollout": {"revision": REVISION, "from": "gated-1a2b3c4d", "phase": "Progressing",
                    "wave": 1, "waves": 2, "target": 1, "updated": 1}}}})),
        )
        .await
        .unwrap();
    let key = Key::random();
    let hooks = start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns).await;

    // Edit rights do not roll out: refused, naming the verb; nothing set.
    let (ok, out) = annotate(
        &ns,
        "gated",
        Some("tenant"),
        "ops.example.com/rollout=promote",
    )
    .await;
    assert!(
        !ok && out.contains("tenant may not promote the rollout")
            && out.contains("needs the \"rollout\" verb"),
        "{out}"
    );
    assert!(!annotations(&client, &ns)
        .await
        .contains_key("ops.example.com/rollout"));

    // Nobody writes the stamp by hand, not even an admin.
    let forged = RolloutStamp {
        action: RolloutAction::Undo,
        revision: REVISION.into(),
        user: "boss".into(),
        groups: vec![],
        time: 0,
    }
    .sign(&Key::random(), &ns, "gated");
    let users = [Some("tenant"), Some("boss"), None];
    assert_stamp_refused(&ns, "ops.example.com/rollout-by", &forged, &users).await;
    // A value that names no action is refused.
    let (ok, out) = annotate(
        &ns,
        "gated",
        Some("boss"),
        "ops.example.com/rollout=rollback",
    )
    .await;
    assert!(!ok && out.contains("names no rollout action"), "{out}");

    // The user who may: stamped with their name, groups and the revision status showed, which
    // the controller accepts for that revision only.
    let (ok, out) = annotate(
        &ns,
        "gated",
        Some("boss"),
        "ops.example.com/rollout=promote",
    )
    .await;
    assert!(ok, "{out}");
    let ann = annotations(&client, &ns).await;
    let stamp = RolloutStamp::verify(&key, &ns, "gated", &ann["ops.example.com/rollout-by"])
        .expect("the webhook's stamp verifies");
    assert_eq!(
        (stamp.action, stamp.user.as_str(), stamp.revision.as_str()),
        (RolloutAction::Promote, "boss", REVISION)
    );
    assert!(stamp.groups.contains(&"system:authenticated".to_string()));
    let accepted = control::accepted(Some(&key), (&ns, "gated"), &ann, REVISION).unwrap();
    assert_eq!(
        (accepted.action, accepted.user.as_str()),
        (RolloutAction::Promote, "boss")
    );
    assert_eq!(
        control::accepted(Some(&key), (&ns, "gated"), &ann, "gated-next"),
        None,
        "a stamp for one revision never acts on the next rollout"
    );

    // A stamp sent along with an action is replaced by the webhook's, naming who sent it.
    let patch = json!({"metadata": {"annotations": {
        "ops.example.com/rollout": "pause", "ops.example.com/rollout-by": forged}}});
    let (ok, out) = kubectl_async(&[
        "patch",
        "pf",
        "gated",
        "-n",
        &ns,
        "--type=merge",
        "--as=boss",
        "-p",
        &patch.to_string(),
    ])
    .await;
    assert!(ok, "{out}");
    let ann = annotations(&client, &ns).await;
    let accepted = control::accepted(Some(&key), (&ns, "gated"), &ann, REVISION).unwrap();
    assert_eq!(
        (accepted.action, accepted.user.as_str()),
        (RolloutAction::Pause, "boss")
    );

    // Past the webhook (removed), an admin writes a forged stamp: it does not verify.
    remove_webhooks(&client, &hooks).await;
    let patch = json!({"metadata": {"annotations": {
        "ops.example.com/rollout": "undo", "ops.example.com/rollout-by": forged}}});
    flows(&client, &ns)
        .patch("gated", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    let ann = annotations(&client, &ns).await;
    assert_eq!(ann["ops.example.com/rollout-by"], forged);
    assert_eq!(
        control::accepted(Some(&key), (&ns, "gated"), &ann, REVISION),
        None
    );
}
