//! A flow bound to what the controller itself writes: PseudoFlows (any served version of
//! `ops.example.com`) and the Jobs it makes for runs. Bound to flows, a flow whose
//! ServiceAccount may write them grew a namespace from 2 to 42 flows, put its finalizer on an
//! unrelated flow and overwrote that flow's `status.phase` (issue #42). Refused by the
//! validating webhook through the API server, and by the controller when the webhook is off.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use pseudoflow_controller::webhook::Webhook;
use serde_json::{json, Value};

use crate::common::admission;
use crate::common::harness::setup_with;
use crate::common::{create_flow, flows, wait_status};

/// Every served version of the controller's own group, and the Jobs it writes.
const OWN_KINDS: [(&str, &str); 3] = [
    ("ops.example.com/v1alpha1", "PseudoFlow"),
    ("ops.example.com/v1beta1", "PseudoFlow"),
    ("batch/v1", "Job"),
];

/// The flow's ServiceAccount may do everything to flows and Jobs: only the refusal stops it.
fn rules() -> Value {
    json!([
        {"apiGroups": ["ops.example.com"], "resources": ["pseudoflows", "pseudoflows/status", "pseudoflows/finalizers"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["batch"], "resources": ["jobs", "jobs/status"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    ])
}

/// A flow named `name` (written as `flow_version`) bound to `api_version`/`kind`.
fn bound_flow(ns: &str, name: &str, flow_version: &str, api_version: &str, kind: &str) -> Value {
    json!({"apiVersion": format!("ops.example.com/{flow_version}"), "kind": "PseudoFlow",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"serviceAccountName": "flow",
            "bind": {"apiVersion": api_version, "kind": kind, "record": "Child"},
            "steps": [{"type": "log", "message": "hi ${object.metadata.name}"}]}})
}

/// The flows of `ns` through API version `version` (a flow is created at the version it names).
fn flows_at(client: &kube::Client, ns: &str, version: &str) -> Api<DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk("ops.example.com", version, "PseudoFlow");
    let ar = kube::core::ApiResource::from_gvk_with_plural(&gvk, "pseudoflows");
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// What the error names: the kind's path, or its apiVersion's for the controller's group.
fn names_the_path(message: &str) -> bool {
    message.contains("spec.bind.apiVersion") || message.contains("spec.bind.kind")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_refuses_a_flow_bound_to_flows_of_every_served_version_or_to_jobs() {
    let (client, ns) = setup_with("bind-own-hook", rules()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let name = format!("pseudoflow-{ns}");
    let vwc: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [admission::webhook_entry(port, &ns, "validate")],
    }))
    .unwrap();
    let vwcs = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    vwcs.create(&PostParams::default(), &vwc).await.unwrap();
    let cert =
        pseudoflow_controller::http::WebhookCert::SelfSigned(admission::self_signed(&ns, &name));
    admission::serve(&client, listener, Webhook::new(client.clone()), cert);
    let api = flows(&client, &ns);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    // Active once a typo nested where the schema cannot see is refused by it.
    let typo: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "metadata": {"name": "probe", "namespace": ns},
        "spec": {"steps": [{"type": "loop", "forEach": ["a"], "steps": [{"type": "log", "mesage": "x"}]}]}}))
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !matches!(api.create(&dry, &typo).await, Err(e) if e.to_string().contains("denied")) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhook never answered"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for flow_version in ["v1alpha1", "v1beta1"] {
        for (i, (api_version, kind)) in OWN_KINDS.iter().enumerate() {
            let name = format!("own-{flow_version}-{i}");
            let flow = bound_flow(&ns, &name, flow_version, api_version, kind);
            let created = flows_at(&client, &ns, flow_version)
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(flow).unwrap(),
                )
                .await;
            let refusal = match created {
                Ok(_) => panic!("{flow_version} flow bound to {api_version} {kind} admitted"),
                Err(e) => e.to_string(),
            };
            assert!(
                refusal.contains("denied") && names_the_path(&refusal),
                "{flow_version} flow bound to {api_version} {kind}: {refusal}"
            );
        }
    }
    // A binding to someone else's kind of the same shape is still admitted.
    let fine = bound_flow(&ns, "fine", "v1beta1", "example.com/v1", "PseudoFlow");
    flows_at(&client, &ns, "v1beta1")
        .create(&dry, &serde_json::from_value(fine).unwrap())
        .await
        .expect("a PseudoFlow kind of another group is not the controller's");
    vwcs.delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_webhook_the_controller_refuses_a_flow_bound_to_its_own_kinds_and_touches_no_flow(
) {
    let (client, ns) = setup_with("bind-own", rules()).await;
    // The victim: an unrelated flow, waiting (suspended), which the attack put a finalizer on.
    create_flow(
        &client,
        &ns,
        "victim",
        json!({"suspend": true, "steps": [{"type": "log", "message": "mine"}]}),
    )
    .await;
    let api = flows(&client, &ns);
    let mut names = vec![];
    for (i, (api_version, kind)) in OWN_KINDS.iter().enumerate() {
        for flow_version in ["v1alpha1", "v1beta1"] {
            let name = format!("own-{flow_version}-{i}");
            let flow = bound_flow(&ns, &name, flow_version, api_version, kind);
            flows_at(&client, &ns, flow_version)
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(flow).unwrap(),
                )
                .await
                .unwrap();
            names.push((name, format!("{api_version} {kind}")));
        }
    }
    for (name, what) in &names {
        let status = wait_status(&client, &ns, name, 60, "refused", |s| {
            s["reason"] == "InvalidSpec" || s["reason"] == "Bound"
        })
        .await;
        assert_eq!(
            status["reason"], "InvalidSpec",
            "bound to {what}: {status:#}"
        );
        assert!(
            names_the_path(&status.to_string()),
            "bound to {what}: {status:#}"
        );
    }
    // Give a binding that was served time to act, then look for what it would have done.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let all = api.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(
        all.len(),
        names.len() + 1,
        "no flow was made: {:?}",
        all.iter()
            .map(|f| f.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let victim = api.get("victim").await.unwrap();
    let theirs: Vec<String> = victim
        .metadata
        .finalizers
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.contains("own-"))
        .collect();
    assert!(
        theirs.is_empty(),
        "a bound flow's finalizer on the victim: {theirs:?}"
    );
    assert!(
        victim
            .metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .all(|k| !k.contains("own-")),
        "no mark on the victim"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_bound_to_config_maps_never_serves_the_ones_runs_write() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let (client, ns) = setup_with(
        "bind-own-cm",
        json!([{"apiGroups": [""], "resources": ["configmaps"],
            "verbs": ["get", "list", "watch", "create", "patch", "update"]}]),
    )
    .await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    for (name, labels) in [
        ("theirs", json!({})),
        // As a step's spilled result or a fused segment's journal is labelled.
        (
            "a-result",
            json!({"app.kubernetes.io/managed-by": "pseudoflow"}),
        ),
    ] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": {"k": "v"}});
        cms.create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
            .await
            .unwrap();
    }
    create_flow(
        &client,
        &ns,
        "cms",
        json!({"serviceAccountName": "flow",
            "bind": {"apiVersion": "v1", "kind": "ConfigMap", "record": "Child",
                "status": {"phaseField": "", "conditions": false}},
            "steps": [{"type": "log", "message": "seen ${object.metadata.name}"}]}),
    )
    .await;
    let api = flows(&client, &ns);
    let child = |object: &str| pseudoflow_controller::bind::child::child_name("cms", &ns, object);
    crate::common::eventually(60, "the tenant's ConfigMap served", || async {
        api.get_opt(&child("theirs")).await.unwrap().is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        api.get_opt(&child("a-result")).await.unwrap().is_none(),
        "a run's ConfigMap got a child flow"
    );
    let result = cms.get("a-result").await.unwrap();
    assert!(
        result.metadata.finalizers.unwrap_or_default().is_empty(),
        "a run's ConfigMap got a finalizer"
    );
}
