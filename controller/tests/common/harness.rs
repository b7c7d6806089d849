//! Setup most controller e2e tests share: a namespace whose ServiceAccount `flow` has the rights
//! a test grants, a controller for that namespace, and waiting for a flow by watching it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::runtime::wait::await_condition;
use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::reconcile::flow_resource;
use pseudoflow_controller::{run_controller, Context};
use serde_json::{json, Value};

use super::{env, IMAGE};

pub async fn apply(client: &Client, v: Value) {
    pseudoflow_testenv::apply::apply_value(client, v, None)
        .await
        .unwrap();
}

/// A namespace whose ServiceAccount `flow` may manage ConfigMaps and read PseudoFlows there,
/// with a controller for it.
pub async fn setup(prefix: &str) -> (Client, String) {
    setup_with(prefix, json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]},
        {"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["get"]},
    ]))
    .await
}

/// [`setup`] with the flow's Role `rules`.
pub async fn setup_with(prefix: &str, rules: Value) -> (Client, String) {
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
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "flow", "namespace": ns}, "rules": rules})).await;
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

pub async fn create_flow(client: &Client, ns: &str, name: &str, spec: Value) {
    apply(client, json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {"name": name, "namespace": ns}, "spec": spec})).await;
}

pub async fn wait_done(client: &Client, ns: &str, name: &str) -> Value {
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

pub fn step<'a>(status: &'a Value, path: &str) -> &'a Value {
    status["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"] == path)
        .unwrap_or_else(|| panic!("no status entry for {path}: {status:#}"))
}

pub async fn config_map(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

pub fn created(cm: &ConfigMap) -> k8s_openapi::jiff::Timestamp {
    cm.metadata.creation_timestamp.clone().unwrap().0
}
