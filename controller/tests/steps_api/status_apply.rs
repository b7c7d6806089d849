//! `apply` with `subresource: status` (as `kubectl apply --subresource=status`) on testenv: a
//! custom object's status written by server-side apply, as the flow's ServiceAccount, in the
//! controller and in an executor Job alike, its spec untouched, never to an object that does
//! not exist; a ServiceAccount that may not
//! patch `<plural>/status` fails naming that right; any other subresource is refused at apply,
//! naming the field.

use kube::api::{Api, DynamicObject};
use serde_json::{json, Value};

use crate::common::api::{create_widget, install_widget_crd, widget_resource, WIDGET_API_VERSION};
use crate::common::{create_flow, jobs, setup, step, wait_done};

/// Flow rights to read Widgets, and, with `status`, to patch their status.
fn widget_rules(status: bool) -> Value {
    let g = crate::common::api::WIDGET_GROUP;
    let mut rules = vec![json!({"apiGroups": [g], "resources": ["widgets"], "verbs": ["get"]})];
    if status {
        rules.push(json!({"apiGroups": [g], "resources": ["widgets/status"], "verbs": ["patch"]}));
    }
    Value::Array(rules)
}

/// A flow whose API steps run where `api_steps` says, applying `note` to widget `name`'s status
/// (and, to be ignored, a spec).
fn status_flow(api_steps: &str, name: &str, note: &str) -> Value {
    json!({"serviceAccountName": "flow", "options": {"apiSteps": api_steps}, "steps": [
        {"type": "apply", "subresource": "status", "manifests": {
            "apiVersion": WIDGET_API_VERSION, "kind": "Widget", "metadata": {"name": name},
            "spec": {"size": 99}, "status": {"note": note}}}]})
}

async fn widget(client: &kube::Client, ns: &str, name: &str) -> DynamicObject {
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &widget_resource())
        .get(name)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_to_the_status_subresource_writes_only_the_status_in_the_controller_and_in_a_job() {
    let (client, ns, _ctl) = setup("apply-status", widget_rules(true), json!([])).await;
    install_widget_crd(&client).await;
    for (mode, name) in [("Controller", "in-ctl"), ("Job", "in-job")] {
        create_widget(&client, &ns, name, Value::Null).await;
        let note = format!("written {mode}");
        create_flow(&client, &ns, name, status_flow(mode, name, &note)).await;
        let st = wait_done(&client, &ns, name, 120).await;
        assert_eq!(st["phase"], "Succeeded", "{mode}: {st:#}");
        let s = step(&st, "spec.steps[0]");
        let msg = s["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("applied the status of 1 object (changed)")
                && msg.contains(&format!("Widget/{ns}/{name}")),
            "{mode}: {s:#}"
        );
        let w = widget(&client, &ns, name).await;
        assert_eq!(w.data["status"]["note"], note.as_str(), "{mode}: {w:?}");
        assert_eq!(w.data["spec"]["size"], 1, "{mode}: the spec is untouched");
        let managers: Vec<_> = w
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| m.subresource.as_deref() == Some("status"))
            .map(|m| (m.manager.clone(), m.operation.clone()))
            .collect();
        assert!(
            managers.contains(&(Some("pseudoflow".into()), Some("Apply".into()))),
            "{mode}: server-side applied to status: {managers:?}"
        );
        // The controller flow runs first: no Job until the Job flow's step.
        let made = jobs(&client, &ns).await.len();
        assert_eq!(made == 0, mode == "Controller", "{mode}: {made} Job(s)");
    }
    // A status is never a way to create an object: one that does not exist fails the step.
    create_flow(
        &client,
        &ns,
        "missing",
        status_flow("Controller", "nope", "x"),
    )
    .await;
    let st = wait_done(&client, &ns, "missing", 60).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    let msg = step(&st, "spec.steps[0]")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        msg.contains(&format!("Widget/{ns}/nope does not exist")),
        "{st:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_that_may_not_patch_the_status_fails_naming_that_right() {
    let (client, ns, _ctl) = setup("apply-status-denied", widget_rules(false), json!([])).await;
    install_widget_crd(&client).await;
    create_widget(&client, &ns, "w", Value::Null).await;
    create_flow(
        &client,
        &ns,
        "denied",
        status_flow("Controller", "w", "never"),
    )
    .await;
    let st = wait_done(&client, &ns, "denied", 60).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    let msg = step(&st, "spec.steps[0]")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains("forbidden")
            && msg.contains(&format!(
                "serviceaccount {ns}/flow cannot patch widgets/status \"w\""
            )),
        "names the account, the verb and the subresource: {msg}"
    );
    assert!(widget(&client, &ns, "w").await.data["status"]
        .get("note")
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subresource_other_than_status_is_refused_naming_its_field() {
    let (client, ns, _ctl) = setup("apply-status-spec", widget_rules(true), json!([])).await;
    let mut flow = status_flow("Controller", "w", "x");
    flow["steps"][0]["subresource"] = json!("spec");
    let refused = pseudoflow_testenv::apply::apply_value(
        &client,
        json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "spec-sub", "namespace": ns}, "spec": flow}),
        None,
    )
    .await
    .expect_err("refused by the API server");
    let refused = format!("{refused:#}");
    assert!(
        refused.contains("spec.steps[0].subresource") && refused.contains("status"),
        "{refused}"
    );
}
