//! Shorthands over [`crate::controller`] for tests whose flow identity needs only namespaced rights:
//! setup with a default Role, waiting with a default deadline, reading ConfigMaps steps made.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::Client;
use serde_json::{json, Value};

pub use crate::{apply, create_flow, step};

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
    let (client, ns) = crate::prepare(prefix, rules, json!([])).await;
    crate::start_controller(&client, &ns);
    (client, ns)
}

/// Waits (by watching) up to 90 s for the flow's final phase; returns its status.
pub async fn wait_done(client: &Client, ns: &str, name: &str) -> Value {
    crate::wait_done(client, ns, name, 90).await
}

/// The ConfigMap `name` in `ns`, if it exists.
pub async fn config_map(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// When the API server created `cm`.
pub fn created(cm: &ConfigMap) -> k8s_openapi::jiff::Timestamp {
    cm.metadata.creation_timestamp.clone().unwrap().0
}
