//! `include` and `includeFlow` end to end on testenv: fetched steps run in place (after the
//! fetch, before the next step) under the flow's ServiceAccount, invalid fetched steps fail the
//! include with their path and run nothing, an included flow's vars are scoped to its steps, and
//! a cycle across flows is refused.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::wait::await_condition;
use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::reconcile::flow_resource;
use pseudoflow_controller::{run_controller, Context};
use serde_json::{json, Value};

mod common;

use common::{env, IMAGE};

async fn apply(client: &Client, v: Value) {
    pseudoflow_testenv::apply::apply_value(client, v, None)
        .await
        .unwrap();
}

/// A namespace whose ServiceAccount `flow` may manage ConfigMaps and read PseudoFlows there,
/// with a controller for it.
async fn setup(prefix: &str) -> (Client, String) {
    let env = env();
    let client = env.client().await.unwrap();
    pseudoflow_testenv::apply::apply_text(&client, &pseudoflow_crd::schema::crd_yaml(), None)
        .await
        .unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(
            crds,
            "pseudoflows.ops.example.com",
            kube::runtime::wait::conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    let ns = env.namespace(prefix).await.unwrap();
    apply(&client, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "flow", "namespace": ns}})).await;
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "flow", "namespace": ns}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]},
        {"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["get"]},
    ]})).await;
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "flow", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flow"}, "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]})).await;
    let ctx = Arc::new(Context::new(
        client.clone(),
        IMAGE.into(),
        Arc::new(Metrics::default()),
    ));
    tokio::spawn(run_controller(ctx, Some(ns.clone())));
    (client, ns)
}

async fn create_flow(client: &Client, ns: &str, name: &str, spec: Value) {
    apply(client, json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {"name": name, "namespace": ns}, "spec": spec})).await;
}

async fn wait_done(client: &Client, ns: &str, name: &str) -> Value {
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &flow_resource());
    let done = |o: Option<&DynamicObject>| {
        o.and_then(|f| f.data["status"]["phase"].as_str())
            .is_some_and(|p| p == "Succeeded" || p == "Failed")
    };
    match tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(flows.clone(), name, done),
    )
    .await
    {
        Ok(f) => f.unwrap().unwrap().data["status"].clone(),
        Err(_) => panic!(
            "flow {name} did not finish; status: {:#}",
            flows.get(name).await.unwrap().data["status"]
        ),
    }
}

fn step<'a>(status: &'a Value, path: &str) -> &'a Value {
    status["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"] == path)
        .unwrap_or_else(|| panic!("no status entry for {path}: {status:#}"))
}

async fn config_map(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

fn created(cm: &ConfigMap) -> k8s_openapi::jiff::Timestamp {
    cm.metadata.creation_timestamp.clone().unwrap().0
}

#[tokio::test]
async fn included_steps_run_in_place_under_the_flows_identity() {
    let (client, ns) = setup("include").await;
    let steps = format!(
        "- type: apply\n  manifests: |\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {{name: \"from-include-${{who}}\", namespace: {ns}}}\n- type: log\n  message: included ran for ${{who}}\n"
    );
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared-steps", "namespace": ns}, "data": {"steps.yaml": steps}})).await;
    create_flow(&client, &ns, "inc", json!({
        "serviceAccountName": "flow",
        "vars": {"who": "team-a"},
        "steps": [
            {"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: before, namespace: {ns}}}\n")},
            {"type": "include", "source": {"configMapRef": {"name": "shared-steps", "key": "steps.yaml"}}},
            {"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: after, namespace: {ns}}}\n")},
        ]
    })).await;
    let status = wait_done(&client, &ns, "inc").await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(
        step(&status, "spec.steps[1].included[0]")["phase"],
        "Succeeded"
    );
    assert_eq!(
        step(&status, "spec.steps[1].included[1]")["phase"],
        "Succeeded"
    );
    let before = config_map(&client, &ns, "before").await.expect("before");
    let included = config_map(&client, &ns, "from-include-team-a")
        .await
        .expect("the included apply ran with the flow's vars");
    let after = config_map(&client, &ns, "after").await.expect("after");
    assert!(created(&before) <= created(&included) && created(&included) <= created(&after));
    // In place: the included step's Job ran under the flow's ServiceAccount, like every step.
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels("ops.example.com/flow=inc"))
        .await
        .unwrap();
    let included_job = jobs
        .items
        .iter()
        .find(|j| {
            j.metadata.annotations.as_ref().unwrap()["ops.example.com/step-path"]
                == "spec.steps[1].included[0]"
        })
        .expect("a Job for the included apply");
    assert_eq!(
        included_job
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .service_account_name
            .as_deref(),
        Some("flow")
    );
    // The log step became an Event with the substituted message.
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.message.as_deref() == Some("included ran for team-a")),
        "no Event from the included log step"
    );
}

#[tokio::test]
async fn invalid_included_steps_fail_the_include_with_their_path_and_run_nothing() {
    let (client, ns) = setup("include-bad").await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared-steps", "namespace": ns},
        "data": {"steps.yaml": "- type: log\n  message: fine\n- type: slep\n  seconds: 1\n"}})).await;
    create_flow(&client, &ns, "bad", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"type": "include", "source": {"configMapRef": {"name": "shared-steps", "key": "steps.yaml"}}},
            {"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: after, namespace: {ns}}}\n")},
        ]
    })).await;
    let status = wait_done(&client, &ns, "bad").await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("spec.steps[0].included[1]") && message.contains("\"sleep\""),
        "the failure names the fetched step's path and suggests the type: {message}"
    );
    assert!(
        status["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| !s["path"].as_str().unwrap().contains("included")),
        "no included step may run or be planned: {status:#}"
    );
    assert!(config_map(&client, &ns, "after").await.is_none());
}

#[tokio::test]
async fn include_flow_runs_the_other_flows_steps_with_scoped_vars() {
    let (client, ns) = setup("include-flow").await;
    // A library flow; it also runs on its own (every PseudoFlow does), which is harmless here.
    create_flow(&client, &ns, "lib", json!({
        "serviceAccountName": "flow",
        "vars": {"what": "lib"},
        "steps": [{"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: \"made-by-${{what}}-for-${{who}}\", namespace: {ns}}}\n")}]
    })).await;
    for (flow, inherit) in [("caller-inherits", true), ("caller-isolated", false)] {
        create_flow(
            &client,
            &ns,
            flow,
            json!({
                "serviceAccountName": "flow",
                "vars": {"who": flow, "what": "caller"},
                "steps": [{"type": "includeFlow", "name": "lib", "inheritVars": inherit}]
            }),
        )
        .await;
    }
    let inherits = wait_done(&client, &ns, "caller-inherits").await;
    assert_eq!(inherits["phase"], "Succeeded", "{inherits:#}");
    assert!(
        config_map(&client, &ns, "made-by-caller-for-caller-inherits")
            .await
            .is_some(),
        "with inheritVars the caller's vars are passed in and override the included flow's defaults"
    );
    // Without inheritVars the caller's vars are not visible: `${who}` is an unknown name there.
    let isolated = wait_done(&client, &ns, "caller-isolated").await;
    assert_eq!(isolated["phase"], "Failed", "{isolated:#}");
    let failed = step(&isolated, "spec.steps[0].included[0]");
    assert!(
        failed["message"].as_str().unwrap().contains("who"),
        "{failed:#}"
    );
}

#[tokio::test]
async fn a_cycle_across_flows_is_refused_before_it_repeats() {
    let (client, ns) = setup("include-cycle").await;
    create_flow(
        &client,
        &ns,
        "ping",
        json!({"serviceAccountName": "flow", "steps": [{"type": "includeFlow", "name": "pong"}]}),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "pong",
        json!({"serviceAccountName": "flow", "steps": [{"type": "includeFlow", "name": "ping"}]}),
    )
    .await;
    let status = wait_done(&client, &ns, "ping").await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let want = format!("includeFlow cycle: {ns}/ping → {ns}/pong → {ns}/ping");
    assert!(
        status["message"].as_str().unwrap().contains(&want),
        "{status:#}"
    );
}
