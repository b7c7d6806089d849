//! `type: approval`, end to end on testenv's real kube-apiserver, which calls both admission
//! webhooks (validating: who may approve; mutating: the stamp recording who did): the run waits
//! with phase, message and an Event saying so; a user with edit rights but not `approve` is
//! refused, and so is a stamp written by a client; an allowed user's approval continues the run
//! and status records their name, groups and time; an approval from an earlier run does not
//! carry over; a reject fails the run naming who rejected; without the webhook neither a bare
//! approval nor a forged stamp is accepted, until the step's timeout fails the run; and inside a
//! rolling loopNodes each node needs its own approval. The webhooks answer the API server only
//! (its client certificate): a pod posting a forged review claiming system:masters gets nothing.

mod common;

use std::time::Duration;

use common::admission::{
    editor_and_approver, kubectl_async, start_controller_with_key, start_webhooks,
};
use common::*;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DeleteParams};
use kube::Client;
use pseudoflow_controller::approval::{Decision, Key, Stamp};
use pseudoflow_controller::http::tls;
use serde_json::{json, Value};

async fn remove_webhooks(client: &Client, name: &str) {
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
async fn annotate(ns: &str, name: &str, user: Option<&str>, what: &str) -> (bool, String) {
    let as_user = user.map(|u| format!("--as={u}"));
    let mut args = vec!["annotate", "pf", name, "-n", ns, "--overwrite", what];
    args.extend(as_user.as_deref());
    kubectl_async(&args).await
}

/// Waits until both webhooks answer: a dry run of a flow carrying a client-written stamp is
/// refused by the mutating one (the configurations and CA have propagated).
async fn wait_webhooks_active(ns: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = annotate(ns, "gated", None, "ops.example.com/approved-by=probe").await;
        if !ok && out.contains("written by the admission webhook only") {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhooks never answered: {ok} {out}"
        );
        // A probe that got through is undone.
        if ok {
            annotate(ns, "gated", None, "ops.example.com/approved-by-").await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn gated_spec(timeout: Option<u32>) -> Value {
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
fn apply_config_map(ns: &str, name: &str) -> Value {
    json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}}})
}

/// The gate between two Job steps (which would otherwise share one Job).
fn gated_between_jobs(ns: &str) -> Value {
    json!({"serviceAccountName": "flow", "steps": [
        apply_config_map(ns, "before"),
        {"type": "approval", "name": "gate", "message": "check the canary"},
        apply_config_map(ns, "after"),
    ]})
}

async fn config_map_exists(client: &Client, ns: &str, name: &str) -> bool {
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

/// Waits until the flow waits at `gate` in a run other than `not_run`; returns its status.
async fn wait_waiting(client: &Client, ns: &str, name: &str, not_run: &str) -> Value {
    wait_status(client, ns, name, 30, "waiting for approval", |st| {
        st["reason"] == "WaitingForApproval" && st["run"]["id"] != not_run
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_by_an_allowed_user_continues_the_run_and_is_recorded_a_reject_fails_it() {
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "patch"]}]);
    let (client, ns) = prepare("approval", rules, json!([])).await;
    editor_and_approver(&client, &ns).await;
    let key = Key::random();
    let ctl = start_controller_with_key(&client, &ns, &key);
    create_flow(&client, &ns, "gated", gated_between_jobs(&ns)).await;
    let vwc = start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns).await;

    // Waiting: phase, reason, message, the step's entry and an Event.
    let st = wait_waiting(&client, &ns, "gated", "").await;
    assert_eq!(st["phase"], "Running", "{st:#}");
    assert_eq!(st["message"], "waiting for approval: gate", "{st:#}");
    let gate = step(&st, "spec.steps[1]");
    assert_eq!(gate["phase"], "Running", "{st:#}");
    assert_eq!(gate["message"], "waiting for approval: gate", "{st:#}");
    let events = flow_events(&client, &ns, "gated").await;
    let waiting = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("WaitingForApproval"))
        .unwrap_or_else(|| panic!("no WaitingForApproval Event: {events:#?}"));
    let note = waiting.message.clone().unwrap_or_default();
    assert!(
        note.contains("waiting for approval: gate (check the canary)")
            && note.contains("ops.example.com/approve=gate"),
        "{note}"
    );

    // Edit rights do not approve; nobody writes the stamp by hand, not even an admin.
    let (ok, out) = annotate(&ns, "gated", Some("tenant"), "ops.example.com/approve=gate").await;
    assert!(!ok && out.contains("tenant may not approve"), "{out}");
    let forged = Stamp {
        decision: Decision::Approve,
        step: "gate".into(),
        user: "boss".into(),
        groups: vec![],
        time: pseudoflow_controller::approval::now_ms(),
        run: st["run"]["id"].as_str().unwrap().into(),
    }
    .sign(&Key::random(), &ns, "gated");
    for user in [Some("tenant"), None] {
        let (ok, out) = annotate(
            &ns,
            "gated",
            user,
            &format!("ops.example.com/approved-by={forged}"),
        )
        .await;
        assert!(
            !ok && out.contains("written by the admission webhook only"),
            "{user:?}: {out}"
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let st = flows(&client, &ns).get("gated").await.unwrap().data["status"].clone();
    assert_eq!(st["reason"], "WaitingForApproval", "{st:#}");
    assert!(config_map_exists(&client, &ns, "before").await);
    assert!(
        !config_map_exists(&client, &ns, "after").await,
        "nothing after the gate ran"
    );

    // The approver approves: the run goes on, and status says who, in which groups, when.
    let before = tls::unix_now();
    let (ok, out) = annotate(&ns, "gated", Some("boss"), "ops.example.com/approve=gate").await;
    assert!(ok, "{out}");
    let st = wait_done(&client, &ns, "gated", 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert!(config_map_exists(&client, &ns, "after").await);
    let gate = step(&st, "spec.steps[1]");
    assert_eq!(gate["phase"], "Succeeded", "{st:#}");
    let record = &gate["approval"];
    assert_eq!(record["decision"], "Approved", "{st:#}");
    assert_eq!(record["user"], "boss", "{st:#}");
    assert!(
        record["groups"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("system:authenticated"))),
        "{st:#}"
    );
    assert!(common::api::unix(&record["time"]) >= before - 1, "{st:#}");
    assert!(
        gate["message"]
            .as_str()
            .unwrap()
            .starts_with("approved by boss"),
        "{st:#}"
    );
    let first_run = st["run"]["id"].as_str().unwrap().to_string();

    // A new run: the approval (still on the flow) was for the earlier run and does not carry over.
    request_run(&client, &ns, "gated", "2").await;
    let st = wait_waiting(&client, &ns, "gated", &first_run).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st2 = flows(&client, &ns).get("gated").await.unwrap().data["status"].clone();
    assert_eq!(st2["phase"], "Running", "{st2:#}");
    assert_eq!(st2["run"]["id"], st["run"]["id"]);
    let msg = st2["message"].as_str().unwrap();
    assert!(
        msg.starts_with("waiting for approval: gate (") && msg.contains("not accepted"),
        "{st2:#}"
    );

    // Approving a step that is not waiting does nothing.
    let (ok, out) = annotate(&ns, "gated", Some("boss"), "ops.example.com/approve=other").await;
    assert!(ok, "{out}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st3 = flows(&client, &ns).get("gated").await.unwrap().data["status"].clone();
    assert_eq!(st3["message"], "waiting for approval: gate", "{st3:#}");

    // A reject fails the run, naming who rejected.
    let (ok, out) = annotate(&ns, "gated", Some("tenant"), "ops.example.com/reject=gate").await;
    assert!(!ok && out.contains("tenant may not reject"), "{out}");
    let (ok, out) = annotate(&ns, "gated", Some("boss"), "ops.example.com/reject=gate").await;
    assert!(ok, "{out}");
    let st = wait_done(&client, &ns, "gated", 30).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert!(
        st["message"].as_str().unwrap().contains("rejected by boss"),
        "{st:#}"
    );
    let gate = step(&st, "spec.steps[1]");
    assert_eq!(gate["approval"]["decision"], "Rejected", "{st:#}");
    assert_eq!(gate["approval"]["user"], "boss", "{st:#}");
    assert!(
        st["steps"].as_array().unwrap().len() == 2,
        "the step after the gate never ran: {st:#}"
    );

    remove_webhooks(&client, &vwc).await;
    ctl.abort();
}

/// The port the mutating webhook configuration `name` calls (`https://127.0.0.1:PORT/mutate`).
async fn webhook_port(client: &Client, name: &str) -> u16 {
    let mwc = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    let url = mwc.webhooks.unwrap()[0].client_config.url.clone().unwrap();
    let port = url.trim_start_matches("https://127.0.0.1:");
    port.split('/').next().unwrap().parse().unwrap()
}

/// What a pod on the network would send `/mutate` to mint an approval of `gate` in `run` by
/// someone in system:masters (the AdmissionReview's userInfo is whatever the caller writes).
fn forged_review(ns: &str, run: &str) -> Vec<u8> {
    let flow = |annotations: Value| {
        json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "gated", "namespace": ns, "annotations": annotations},
            "spec": gated_spec(None), "status": {"run": {"id": run}}})
    };
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "forged", "name": "gated", "namespace": ns, "operation": "UPDATE",
            "kind": {"group": "ops.example.com", "version": "v1alpha1", "kind": "PseudoFlow"},
            "resource": {"group": "ops.example.com", "version": "v1alpha1", "resource": "pseudoflows"},
            "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
            "object": flow(json!({"ops.example.com/approve": "gate"})),
            "oldObject": flow(json!({})),
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_posting_a_forged_review_to_the_webhook_gets_no_stamp_and_the_api_server_still_gets_one(
) {
    let (client, ns) = prepare("approval-forge", json!([]), json!([])).await;
    editor_and_approver(&client, &ns).await;
    let key = Key::random();
    let ctl = start_controller_with_key(&client, &ns, &key);
    create_flow(&client, &ns, "gated", gated_spec(None)).await;
    let name = start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns).await;
    let st = wait_waiting(&client, &ns, "gated", "").await;
    let run = st["run"]["id"].as_str().unwrap().to_string();

    // The caller trusts the webhook's serving CA (it is public: it sits in the configurations)
    // and posts a review claiming system:masters approved, with no client certificate, and
    // with the cluster admin's (same CA as the API server's, another name).
    let port = webhook_port(&client, &name).await;
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns)
        .get("pseudoflow-webhook-tls")
        .await
        .unwrap();
    let ca = tls::Bundle::from_secret(&secret).unwrap().ca_pem;
    let pki = env().dir().join("pki");
    let admin = (pki.join("admin.crt"), pki.join("admin.key"));
    let forged = forged_review(&ns, &run);
    for identity in [None, Some((admin.0.as_path(), admin.1.as_path()))] {
        for path in ["/mutate", "/validate"] {
            let answer = admission::post_from_the_network(port, &ca, identity, path, &forged).await;
            assert!(
                answer.as_ref().map_or(true, |a| a.is_empty()),
                "a network caller ({identity:?}) got an answer from {path}: {answer:?}"
            );
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let st = flows(&client, &ns).get("gated").await.unwrap().data["status"].clone();
    assert_eq!(st["reason"], "WaitingForApproval", "{st:#}");

    // Through the API server (its client certificate), the approver's decision is stamped.
    let (ok, out) = annotate(&ns, "gated", Some("boss"), "ops.example.com/approve=gate").await;
    assert!(ok, "{out}");
    let st = wait_done(&client, &ns, "gated", 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert_eq!(
        step(&st, "spec.steps[1]")["approval"]["user"],
        "boss",
        "{st:#}"
    );

    remove_webhooks(&client, &name).await;
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_webhook_no_approval_or_forged_stamp_is_accepted_and_the_timeout_fails_the_step(
) {
    let (client, ns) = prepare("approval-off", json!([]), json!([])).await;
    let key = Key::random();
    let ctl = start_controller_with_key(&client, &ns, &key);
    create_flow(&client, &ns, "gated", gated_spec(Some(8))).await;
    let st = wait_waiting(&client, &ns, "gated", "").await;
    let run = st["run"]["id"].as_str().unwrap().to_string();

    // A bare approval: no stamp, and the message says why it is not accepted.
    let (ok, out) = annotate(&ns, "gated", None, "ops.example.com/approve=gate").await;
    assert!(ok, "{out}");
    wait_status(&client, &ns, "gated", 10, "the approval refused", |st| {
        st["message"]
            .as_str()
            .is_some_and(|m| m.contains("no ops.example.com/approved-by stamp"))
    })
    .await;

    // A forged stamp (for this flow, step and run, but not under the controller's key).
    let forged = Stamp {
        decision: Decision::Approve,
        step: "gate".into(),
        user: "boss".into(),
        groups: vec!["system:masters".into()],
        time: pseudoflow_controller::approval::now_ms(),
        run,
    }
    .sign(&Key::random(), &ns, "gated");
    let (ok, out) = annotate(
        &ns,
        "gated",
        None,
        &format!("ops.example.com/approved-by={forged}"),
    )
    .await;
    assert!(ok, "{out}");
    wait_status(
        &client,
        &ns,
        "gated",
        10,
        "the forged stamp refused",
        |st| {
            st["message"]
                .as_str()
                .is_some_and(|m| m.contains("not signed by the admission webhook"))
        },
    )
    .await;

    // The step's timeout fails the run, naming the step.
    let st = wait_done(&client, &ns, "gated", 30).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    let msg = st["message"].as_str().unwrap();
    assert!(
        msg.contains("timed out after 8s waiting for approval: gate"),
        "{st:#}"
    );
    assert!(step(&st, "spec.steps[1]")["approval"].is_null(), "{st:#}");
    ctl.abort();
}

/// The `status.steps` entry of the approval inside the loopNodes: how many nodes it let go.
fn passed(st: &Value) -> u64 {
    step(st, "spec.steps[0].steps[0]")["instances"]["succeeded"]
        .as_u64()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_rolling_loop_nodes_each_node_needs_its_own_approval() {
    let nodes =
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]);
    let (client, ns) = prepare("approval-roll", json!([]), nodes).await;
    editor_and_approver(&client, &ns).await;
    let key = Key::random();
    let ctl = start_controller_with_key(&client, &ns, &key);
    create_flow(
        &client,
        &ns,
        "gated",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "loopNodes", "selector": "", "maxParallel": 1, "steps": [
                {"type": "approval", "name": "next-node"},
                {"type": "log", "message": "${node} done"},
            ]}
        ]}),
    )
    .await;
    let vwc = start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns).await;
    let total = 3; // cp-0, worker-0, worker-1
    for n in 0..total {
        let st = wait_status(&client, &ns, "gated", 60, "the next node waiting", |st| {
            st["reason"] == "WaitingForApproval" && passed(st) == n
        })
        .await;
        let msg = st["message"].as_str().unwrap();
        assert!(msg.starts_with("waiting for approval: next-node"), "{st:#}");
        // The previous node's approval is still on the flow: it does not let this node go.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let st = flows(&client, &ns).get("gated").await.unwrap().data["status"].clone();
        assert_eq!(
            passed(&st),
            n,
            "node {n} went without its own approval: {st:#}"
        );
        if n > 0 {
            annotate(&ns, "gated", Some("boss"), "ops.example.com/approve-").await;
        }
        let (ok, out) = annotate(
            &ns,
            "gated",
            Some("boss"),
            "ops.example.com/approve=next-node",
        )
        .await;
        assert!(ok, "{out}");
    }
    let st = wait_done(&client, &ns, "gated", 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert_eq!(passed(&st), total, "{st:#}");
    // Each node's approval is told by an Event naming who gave it.
    let approved = flow_events(&client, &ns, "gated")
        .await
        .into_iter()
        .filter(|e| {
            e.message
                .as_deref()
                .is_some_and(|m| m.contains("approved by boss"))
        })
        .count();
    assert_eq!(approved as u64, total);
    remove_webhooks(&client, &vwc).await;
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_asks_the_gate_again() {
    // `flow` may make ConfigMaps, not Secrets: the step after the gate fails.
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "patch"]}]);
    let (client, ns) = prepare("approval-retry", rules, json!([])).await;
    editor_and_approver(&client, &ns).await;
    let key = Key::random();
    let ctl = start_controller_with_key(&client, &ns, &key);
    let forbidden = json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "nope", "namespace": ns}}});
    create_flow(
        &client,
        &ns,
        "gated",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "approval", "name": "gate"},
            apply_config_map(&ns, "after"),
            forbidden,
        ]}),
    )
    .await;
    let vwc = start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns).await;
    let first = wait_waiting(&client, &ns, "gated", "").await;
    let first_run = first["run"]["id"].as_str().unwrap().to_string();
    let (ok, out) = annotate(&ns, "gated", Some("boss"), "ops.example.com/approve=gate").await;
    assert!(ok, "{out}");
    let st = wait_done(&client, &ns, "gated", 60).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert!(config_map_exists(&client, &ns, "after").await);

    // A retry (by someone who may annotate, not approve): the gate asks again, and nothing
    // after it runs; the earlier run's approval (still on the flow) does not count.
    let (ok, out) = annotate(&ns, "gated", Some("tenant"), "ops.example.com/retry=1").await;
    assert!(ok, "{out}");
    let st = wait_waiting(&client, &ns, "gated", &first_run).await;
    assert_eq!(st["run"]["retryOf"], first_run.as_str(), "{st:#}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = flows(&client, &ns).get("gated").await.unwrap().data["status"].clone();
    assert_eq!(st["reason"], "WaitingForApproval", "{st:#}");
    assert_eq!(step(&st, "spec.steps[0]")["phase"], "Running", "{st:#}");
    assert!(step(&st, "spec.steps[0]")["approval"].is_null(), "{st:#}");
    let after = st["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "spec.steps[2]");
    assert!(after.is_none_or(|e| e["phase"] == "Pending"), "{st:#}");

    // A new approval lets it go on (to the same failure).
    annotate(&ns, "gated", Some("boss"), "ops.example.com/approve-").await;
    let (ok, out) = annotate(&ns, "gated", Some("boss"), "ops.example.com/approve=gate").await;
    assert!(ok, "{out}");
    let st = wait_done(&client, &ns, "gated", 60).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert_eq!(step(&st, "spec.steps[0]")["approval"]["user"], "boss");
    remove_webhooks(&client, &vwc).await;
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approvals_of_one_name_are_an_invalid_spec_naming_both_paths() {
    let (client, ns) = prepare("approval-dup", json!([]), json!([])).await;
    let ctl = start_controller(&client, &ns);
    create_flow(
        &client,
        &ns,
        "twice",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "approval", "name": "gate"},
            {"type": "log", "message": "between"},
            {"type": "approval", "name": "gate"},
        ]}),
    )
    .await;
    let st = wait_done(&client, &ns, "twice", 30).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert_eq!(st["reason"], "InvalidSpec", "{st:#}");
    let msg = st["message"].as_str().unwrap();
    assert!(
        msg.contains(
            "spec.steps[2].name: approval step name \"gate\" is also the name of spec.steps[0]"
        ),
        "{msg}"
    );
    ctl.abort();
}
