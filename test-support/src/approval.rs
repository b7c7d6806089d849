//! What the tests of `type: approval` share (the admission suite's and the adversarial one's):
//! annotating a flow as a given user, waiting until both webhooks answer, gated flows, and
//! waiting for a run to wait at its gate.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DeleteParams};
use kube::Client;
use serde_json::{json, Value};

use crate::admission::kubectl_async;
use crate::wait_status;

/// Deletes both webhook configurations `name` ([`crate::admission::start_webhooks`] made them).
pub async fn remove_webhooks(client: &Client, name: &str) {
    let dp = DeleteParams::default();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(name, &dp)
        .await
        .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(name, &dp)
        .await
        .unwrap();
}

/// `kubectl annotate pf NAME -n NS --overwrite` as `user` (None: the admin).
pub async fn annotate(ns: &str, name: &str, user: Option<&str>, what: &str) -> (bool, String) {
    let as_user = user.map(|u| format!("--as={u}"));
    let mut args = vec!["annotate", "pf", name, "-n", ns, "--overwrite", what];
    args.extend(as_user.as_deref());
    kubectl_async(&args).await
}

/// Asserts that setting the stamp `annotation` to `value` on flow `gated` is refused to each of
/// `users` (None: the admin): whatever it says, only the admission webhook writes a stamp.
pub async fn assert_stamp_refused(ns: &str, annotation: &str, value: &str, users: &[Option<&str>]) {
    for &user in users {
        let what = format!("{annotation}={value}");
        let (ok, out) = annotate(ns, "gated", user, &what).await;
        assert!(
            !ok && out.contains("written by the admission webhook only"),
            "{user:?}: {out}"
        );
    }
}

/// Waits until both webhooks answer for flow `gated` (the approval tests' flow): see
/// [`wait_webhooks_active_on`].
pub async fn wait_webhooks_active(ns: &str) {
    wait_webhooks_active_on(ns, "gated").await
}

/// Waits until both webhooks answer: setting a client-written stamp on flow `flow` is refused
/// by the mutating one (the configurations and CA have propagated). Any flow will do: the
/// stamp is refused whatever the flow is.
pub async fn wait_webhooks_active_on(ns: &str, flow: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = annotate(ns, flow, None, "ops.example.com/approved-by=probe").await;
        if !ok && out.contains("written by the admission webhook only") {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhooks never answered: {ok} {out}"
        );
        // A probe that got through is undone.
        if ok {
            annotate(ns, flow, None, "ops.example.com/approved-by-").await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A flow whose `log` steps sit before and after the approval `gate` (with `timeout`, if any).
pub fn gated_spec(timeout: Option<u32>) -> Value {
    let mut gate = json!({"type": "approval", "name": "gate", "message": "check the canary"});
    if let Some(t) = timeout {
        gate["timeoutSeconds"] = json!(t);
    }
    json!({"serviceAccountName": "flow", "steps": [
        {"type": "log", "message": "before"},
        gate,
        {"type": "log", "message": "after"},
    ]})
}

/// A ConfigMap `name` made by an `apply` step.
pub fn apply_config_map(ns: &str, name: &str) -> Value {
    json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}}})
}

/// The gate between two Job steps (which would otherwise share one Job).
pub fn gated_between_jobs(ns: &str) -> Value {
    json!({"serviceAccountName": "flow", "steps": [
        apply_config_map(ns, "before"),
        {"type": "approval", "name": "gate", "message": "check the canary"},
        apply_config_map(ns, "after"),
    ]})
}

/// Whether the ConfigMap `name` exists in `ns`.
pub async fn config_map_exists(client: &Client, ns: &str, name: &str) -> bool {
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

/// Waits until the flow waits at `gate` in a run other than `not_run`; returns its status.
pub async fn wait_waiting(client: &Client, ns: &str, name: &str, not_run: &str) -> Value {
    wait_status(client, ns, name, 30, "waiting for approval", |st| {
        st["reason"] == "WaitingForApproval" && st["run"]["id"] != not_run
    })
    .await
}
