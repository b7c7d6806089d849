//! Attacks on memory (see main.rs): an expression built to make gigabytes in the controller,
//! and runtime data built to be re-parsed as structure (a variable holding a YAML document
//! separator inside `apply.manifests`).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;

use crate::common::{create_flow, setup, wait_done};

/// Five 100 MB strings concatenated: this raised the controller's RSS to 1.5 GB before.
const HOSTILE: &str =
    "${ ('x'*99999999) ~ ('x'*99999999) ~ ('x'*99999999) ~ ('x'*99999999) ~ ('x'*99999999) }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hungry_expression_fails_naming_the_step_and_other_flows_still_run() {
    let (client, ns, _ctl) = setup("memory", json!([]), json!([])).await;
    // Constant: refused when the flow is validated, before anything runs.
    create_flow(
        &client,
        &ns,
        "hog",
        json!({"steps": [
            {"type": "log", "message": "start"},
            {"type": "log", "message": HOSTILE}
        ]}),
    )
    .await;
    // Built from a variable: refused while evaluating, before the big value is made.
    create_flow(
        &client,
        &ns,
        "hog-var",
        json!({"vars": {"x": "x"}, "steps": [
            {"type": "log", "message": "${ (x*9999999) ~ (x*9999999) ~ (x*9999999) }"}
        ]}),
    )
    .await;
    let hog = wait_done(&client, &ns, "hog", 60).await;
    assert_eq!(hog["phase"], "Failed", "{hog:#}");
    let message = hog["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.steps[1].message") && message.contains("work limit"),
        "{hog:#}"
    );
    let hog_var = wait_done(&client, &ns, "hog-var", 60).await;
    assert_eq!(hog_var["phase"], "Failed", "{hog_var:#}");
    let text = hog_var.to_string();
    assert!(
        text.contains("spec.steps[0].message") && text.contains("work limit"),
        "{hog_var:#}"
    );

    create_flow(
        &client,
        &ns,
        "ordinary",
        json!({"vars": {"x": "x"}, "steps": [
            {"type": "log", "message": "${ x * 3 } and ${ [1, 2] | join(',') }"}
        ]}),
    )
    .await;
    let ok = wait_done(&client, &ns, "ordinary", 60).await;
    assert_eq!(ok["phase"], "Succeeded", "{ok:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injection_of_a_document_through_a_variable_in_apply_creates_no_extra_object() {
    let (client, ns, _ctl) = setup(
        "inject",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]),
        json!([]),
    )
    .await;
    let payload = format!(
        "x\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: injected\n  namespace: {ns}\n"
    );
    let manifests = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: made\n  namespace: {ns}\ndata:\n  k: ${{v}}\n"
    );
    create_flow(
        &client,
        &ns,
        "inject",
        json!({
            "serviceAccountName": "flow",
            "vars": {"v": payload},
            "steps": [{"type": "apply", "manifests": manifests}]
        }),
    )
    .await;
    let status = wait_done(&client, &ns, "inject", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let made = cms.get("made").await.unwrap();
    assert_eq!(
        made.data.unwrap()["k"],
        payload,
        "the value lands as a string"
    );
    assert!(
        cms.get_opt("injected").await.unwrap().is_none(),
        "the variable added an object validation never saw"
    );
}
