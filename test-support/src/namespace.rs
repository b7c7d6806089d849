//! A namespace for flows: its ServiceAccount `flow` and the rights granted to it.

use kube::Client;
use pseudoflow_testenv::TestEnv;
use serde_json::{json, Value};

use crate::apply;

/// Builds a fresh namespace whose ServiceAccount `flow` (the identity flows run as) is granted
/// namespaced `rules` (a Role) and cluster-wide `cluster_rules` (a ClusterRole), each only when
/// given.
#[derive(Debug, Clone, Default)]
pub struct FlowNamespace {
    prefix: String,
    rules: Option<Value>,
    cluster_rules: Option<Value>,
}

impl FlowNamespace {
    /// A namespace named after `prefix` (made unique by testenv).
    pub fn new(prefix: &str) -> Self {
        FlowNamespace {
            prefix: prefix.to_string(),
            ..Default::default()
        }
    }

    /// Grants `rules` in the namespace (Role and RoleBinding `flow`).
    pub fn rules(mut self, rules: Value) -> Self {
        self.rules = Some(rules);
        self
    }

    /// Grants `rules` cluster-wide (ClusterRole and ClusterRoleBinding `flow-<namespace>`).
    pub fn cluster_rules(mut self, rules: Value) -> Self {
        self.cluster_rules = Some(rules);
        self
    }

    /// Creates the namespace and what was asked for in it; returns its name.
    pub async fn create(self, env: &TestEnv, client: &Client) -> String {
        let ns = env.namespace(&self.prefix).await.unwrap();
        let subject = json!([{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]);
        apply(client, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "flow", "namespace": ns}})).await;
        if let Some(rules) = self.rules {
            apply(client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "flow", "namespace": ns}, "rules": rules})).await;
            apply(client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "flow", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flow"}, "subjects": subject})).await;
        }
        if let Some(rules) = self.cluster_rules {
            let name = format!("flow-{ns}");
            apply(client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})).await;
            apply(client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}, "subjects": subject})).await;
        }
        ns
    }
}
