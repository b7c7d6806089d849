//! Attacks on approval gates, end to end on testenv's real kube-apiserver with both admission
//! webhooks: a pod posting a forged AdmissionReview claiming system:masters to the webhook port
//! gets no stamp (the webhooks answer the API server's client certificate only); without the
//! webhook neither a bare approval nor a forged stamp is accepted, until the step's timeout
//! fails the run; a retry asks the gate again instead of keeping the earlier run's approval;
//! and two approval steps of one name are an invalid spec, so one annotation cannot decide both.

use std::time::Duration;

use crate::common::admission::{
    self, editor_and_approver, start_controller_with_key, start_webhooks,
};
use crate::common::approval::*;
use crate::common::*;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::Api;
use kube::Client;
use pseudoflow_controller::approval::{Decision, Key, Stamp};
use pseudoflow_controller::http::{self, tls};
use pseudoflow_controller::webhook::Webhook;
use serde_json::{json, Value};

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

/// The webhook as the controller serves it without a client CA (no key, so it stamps nothing),
/// on a free loopback port with a fresh certificate; its port and the certificate's CA.
async fn webhook_without_client_ca(client: &Client, name: &str) -> (u16, String) {
    let dir = std::env::temp_dir().join(format!("pf-oracle-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let b = tls::Bundle::generate(&["127.0.0.1".into()], tls::unix_now(), 3600).unwrap();
    let secret = b.to_secret("ns", "s");
    for f in ["tls.crt", "tls.key"] {
        std::fs::write(dir.join(f), &secret.data.as_ref().unwrap()[f].0).unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut state = http::State::new(std::sync::Arc::default());
    state.webhook = Some(Webhook::new(client.clone()));
    let cert = http::WebhookCert::Files {
        dir,
        reload_every: Duration::from_secs(3600),
    };
    tokio::spawn(http::serve_webhook(
        client.clone(),
        listener,
        http::router(state),
        cert,
        None,
    ));
    (port, b.ca_pem)
}

/// What a pod on the network sends `/validate` to ask "may `user` approve `gated` in `ns`".
fn approval_question(ns: &str, user: &str) -> Vec<u8> {
    let flow = |annotations: Value| {
        json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "gated", "namespace": ns, "annotations": annotations},
            "spec": gated_spec(None)})
    };
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "q", "name": "gated", "namespace": ns, "operation": "UPDATE",
            "kind": {"group": "ops.example.com", "version": "v1alpha1", "kind": "PseudoFlow"},
            "resource": {"group": "ops.example.com", "version": "v1alpha1", "resource": "pseudoflows"},
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": flow(json!({"ops.example.com/approve": "gate"})),
            "oldObject": flow(json!({})),
        }
    }))
    .unwrap()
}

/// The `response` of an AdmissionReview answer (status line, headers, JSON body).
fn response_of(answer: &str) -> Value {
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    serde_json::from_str::<Value>(body).unwrap()["response"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_client_ca_validate_answers_no_approval_question_so_a_pod_learns_nothing() {
    let (client, ns) = prepare("approval-oracle", json!([]), json!([])).await;
    // `boss` may approve in ns, `tenant` may not: an oracle would answer them differently.
    editor_and_approver(&client, &ns).await;
    let (port, ca) = webhook_without_client_ca(&client, &ns).await;
    let mut answers = Vec::new();
    for user in ["boss", "tenant"] {
        let answer = admission::post_from_the_network(
            port,
            &ca,
            None,
            "/validate",
            &approval_question(&ns, user),
        )
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        answers.push(response_of(&answer));
    }
    eprintln!("boss: {}\ntenant: {}", answers[0], answers[1]);
    assert_eq!(
        answers[0], answers[1],
        "the answer depends on whether the user named may approve"
    );
    assert_eq!(answers[0]["allowed"], false, "{}", answers[0]);
    let why = answers[0]["status"]["message"].as_str().unwrap();
    assert!(why.contains("answers no approval question"), "{why}");
    // The webhook still validates flows for such a caller (the compiler is no secret).
    let mut plain = approval_question(&ns, "tenant");
    let text = String::from_utf8(plain.clone()).unwrap();
    plain = text
        .replace(
            r#""annotations":{"ops.example.com/approve":"gate"}"#,
            r#""annotations":{}"#,
        )
        .into_bytes();
    let answer = admission::post_from_the_network(port, &ca, None, "/validate", &plain)
        .await
        .unwrap();
    assert_eq!(response_of(&answer)["allowed"], true, "{answer}");
}

/// Sets the approve annotation and `stamp` (signed with `key`) on flow `name` directly, as the
/// mutating webhook would have written them (no webhook runs in this test).
async fn stamp_directly(client: &Client, ns: &str, name: &str, key: &Key, stamp: &Stamp) {
    let value = stamp.sign(key, ns, name);
    flows(client, ns)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "ops.example.com/approve": stamp.step,
                "ops.example.com/approved-by": value,
            }}})),
        )
        .await
        .unwrap();
}

/// Instances of the loop's gate (`spec.steps[0].steps[0]`) that succeeded.
fn gates_passed(st: &Value) -> u64 {
    st["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|e| e["path"] == "spec.steps[0].steps[0]"))
        .map(|g| {
            g["instances"]["succeeded"]
                .as_u64()
                .unwrap_or(u64::from(g["phase"] == "Succeeded"))
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_stamped_on_a_skewed_webhook_clock_decides_exactly_the_wait_it_was_made_in() {
    let (client, ns) = prepare("approval-clock", json!([]), json!([])).await;
    let key = Key::random();
    let ctl = start_controller_with_key(&client, &ns, &key);
    // One gate per item, one item after another: each wait needs its own decision.
    create_flow(
        &client,
        &ns,
        "gated",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "loop", "forEach": [1, 2], "steps": [
                {"type": "approval", "name": "gate"},
                {"type": "log", "message": "item ${item} approved"},
            ]}
        ]}),
    )
    .await;
    let st = wait_waiting(&client, &ns, "gated", "").await;
    let run = st["run"]["id"].as_str().unwrap().to_string();
    let stamp = |time: i64| Stamp {
        decision: Decision::Approve,
        step: "gate".into(),
        user: "boss".into(),
        groups: vec![],
        time,
        run: run.clone(),
    };
    let now = pseudoflow_controller::approval::now_ms();

    // A webhook replica whose clock runs an hour ahead stamps the first item's approval: it
    // decides that wait, and must not decide the second item's, which begins after it.
    stamp_directly(&client, &ns, "gated", &key, &stamp(now + 3_600_000)).await;
    wait_status(&client, &ns, "gated", 30, "the first item approved", |st| {
        gates_passed(st) >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = flows(&client, &ns).get("gated").await.unwrap().data["status"].clone();
    assert_eq!(
        gates_passed(&st),
        1,
        "the first item's approval also decided the second: {st:#}"
    );
    assert_eq!(st["reason"], "WaitingForApproval", "{st:#}");

    // A replica whose clock runs an hour behind stamps the second item's approval, made while
    // it waits: it decides it.
    stamp_directly(&client, &ns, "gated", &key, &stamp(now - 3_600_000)).await;
    let st = wait_status(&client, &ns, "gated", 30, "the run done", |st| {
        st["phase"] == "Succeeded" || st["phase"] == "Failed"
    })
    .await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert_eq!(gates_passed(&st), 2, "{st:#}");
    ctl.abort();
}
