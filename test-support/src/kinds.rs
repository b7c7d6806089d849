//! A custom kind of the tests' own, for flows bound to a kind (`spec.bind`): each suite names
//! its own group and kind, so that its objects and watches are its own.

use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::Client;
use serde_json::{json, Value};

/// A namespaced kind `kind` of `group`, version `v1`, plural `<kind in lower case>s`, with a
/// status subresource; its spec and status keep any field.
pub struct TestKind {
    /// The kind's resource, for `Api::namespaced_with`.
    pub resource: ApiResource,
}

impl TestKind {
    /// The kind `kind` of `group`.
    pub fn new(group: &str, kind: &str) -> TestKind {
        let plural = format!("{}s", kind.to_lowercase());
        TestKind {
            resource: ApiResource {
                group: group.into(),
                version: "v1".into(),
                api_version: format!("{group}/v1"),
                kind: kind.into(),
                plural,
            },
        }
    }

    /// Its CustomResourceDefinition.
    pub fn crd(&self) -> Value {
        let r = &self.resource;
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{}", r.plural, r.group)},
            "spec": {"group": r.group, "scope": "Namespaced",
                "names": {"kind": r.kind, "plural": r.plural, "singular": r.kind.to_lowercase(),
                    "listKind": format!("{}List", r.kind)},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
    }

    /// Applies its CRD and waits until the API server serves the kind in `ns`; returns its API
    /// there.
    pub async fn install(&self, client: &Client, ns: &str) -> Api<DynamicObject> {
        crate::apply(client, self.crd()).await;
        let api = self.api(client, ns);
        crate::eventually(30, &format!("{} served", self.resource.plural), || async {
            api.list(&Default::default()).await.is_ok()
        })
        .await;
        api
    }

    /// Its objects in `ns`.
    pub fn api(&self, client: &Client, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), ns, &self.resource)
    }

    /// An object `name` of it in `ns` with `spec`.
    pub fn object(&self, ns: &str, name: &str, spec: Value) -> Value {
        json!({"apiVersion": self.resource.api_version, "kind": self.resource.kind,
            "metadata": {"name": name, "namespace": ns}, "spec": spec})
    }

    /// The rights a bound flow's ServiceAccount needs on it: watch, list and get its objects,
    /// patch their finalizers and their status.
    pub fn bound_rules(&self) -> Value {
        let (g, p) = (&self.resource.group, &self.resource.plural);
        json!([
            {"apiGroups": [g], "resources": [p], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [g], "resources": [format!("{p}/status")], "verbs": ["patch"]},
        ])
    }
}
