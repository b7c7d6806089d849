//! Helpers for the API-step tests: a custom kind (`Widget`) whose status a test writes while a
//! flow waits on it, waiting for a step to be running, a one-file HTTP server the step pods can
//! reach, and reading what a run left behind (resourceVersions, every text a run published).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::{apply, wait_status};

/// Group of the test kind `Widget` (namespaced, with a status subresource).
pub const WIDGET_GROUP: &str = "apisteps.example.com";
/// apiVersion of `Widget`.
pub const WIDGET_API_VERSION: &str = "apisteps.example.com/v1";

/// The `Widget` resource, for typed-less API handles.
pub fn widget_resource() -> ApiResource {
    ApiResource {
        group: WIDGET_GROUP.into(),
        version: "v1".into(),
        api_version: WIDGET_API_VERSION.into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

/// Installs the `Widget` CRD (idempotent: every test of the binary may call it) and waits until
/// it is served.
pub async fn install_widget_crd(client: &Client) {
    apply(client, json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{WIDGET_GROUP}")},
        "spec": {"group": WIDGET_GROUP, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .await;
    let widgets: Api<DynamicObject> = Api::all_with(client.clone(), &widget_resource());
    let gvk = kube::api::GroupVersionKind::gvk(WIDGET_GROUP, "v1", "Widget");
    // Served for LIST is not yet discoverable: `apply` resolves the kind through discovery,
    // which may lag behind (seen as a 404 under load), so wait for both.
    eventually(30, "the Widget kind is served and discoverable", || async {
        widgets.list(&ListParams::default().limit(1)).await.is_ok()
            && kube::discovery::pinned_kind(client, &gvk).await.is_ok()
    })
    .await;
}

/// Creates Widget `name` in `ns`, then sets its `status` (null for none).
pub async fn create_widget(client: &Client, ns: &str, name: &str, status: Value) {
    apply(
        client,
        json!({"apiVersion": WIDGET_API_VERSION, "kind": "Widget",
        "metadata": {"name": name, "namespace": ns}, "spec": {"size": 1}}),
    )
    .await;
    if !status.is_null() {
        set_widget_status(client, ns, name, status).await;
    }
}

/// Replaces parts of Widget `name`'s status (a merge patch of the status subresource).
pub async fn set_widget_status(client: &Client, ns: &str, name: &str, status: Value) {
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &widget_resource())
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap();
}

/// A `status.conditions` list from `(type, status)` pairs.
pub fn conditions(pairs: &[(&str, &str)]) -> Value {
    pairs
        .iter()
        .map(|(t, s)| json!({"type": t, "status": s, "reason": "Test", "message": "set by the test"}))
        .collect()
}

/// Waits (by watching) until the step at `path` of flow `name` is Running; returns the status.
pub async fn wait_step_running(client: &Client, ns: &str, name: &str, path: &str) -> Value {
    wait_status(client, ns, name, 60, &format!("{path} running"), |st| {
        st["steps"].as_array().is_some_and(|s| {
            s.iter()
                .any(|e| e["path"] == path && e["phase"] == "Running")
        })
    })
    .await
}

/// Waits (by watching) until a run other than `previous_run` is final; returns its status.
pub async fn wait_next_run(client: &Client, ns: &str, name: &str, previous_run: &Value) -> Value {
    wait_status(client, ns, name, 90, "the next run done", |st| {
        st["run"]["id"] != *previous_run && (st["phase"] == "Succeeded" || st["phase"] == "Failed")
    })
    .await
}

pub use crate::eventually;

/// An RFC 3339 timestamp from status, as Unix seconds.
pub fn unix(rfc3339: &Value) -> i64 {
    rfc3339
        .as_str()
        .unwrap_or_else(|| panic!("not a timestamp: {rfc3339}"))
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second()
}

/// The labels of ConfigMap `name`.
pub async fn labels_of(client: &Client, ns: &str, name: &str) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default()
}

/// The resourceVersion of each ConfigMap in `ns` whose name starts with `prefix`, by name.
pub async fn config_map_versions(
    client: &Client,
    ns: &str,
    prefix: &str,
) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| {
            (
                c.metadata.name.unwrap_or_default(),
                c.metadata.resource_version.unwrap_or_default(),
            )
        })
        .filter(|(name, _)| name.starts_with(prefix))
        .collect()
}

/// Every text a run in `ns` published where a user could read it: Event reasons and messages,
/// pod termination messages, and ConfigMap data (results too large for a termination message).
pub async fn published_texts(client: &Client, ns: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        out.extend(e.reason);
        out.extend(e.message);
    }
    for p in Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        for c in p
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
        {
            if let Some(t) = c.state.and_then(|s| s.terminated) {
                out.extend(t.message);
            }
        }
    }
    for c in Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        out.extend(c.data.unwrap_or_default().into_values());
    }
    out
}

/// A tiny HTTP server on 127.0.0.1 answering every GET with one document; it lives as long as
/// the test's runtime.
pub struct Served {
    /// Base URL, `http://127.0.0.1:<port>`.
    pub url: String,
    /// The request line of every request received.
    pub requests: Arc<Mutex<Vec<String>>>,
}

/// Serves `body` with status 200 to every request.
pub async fn serve(body: String) -> Served {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (body, seen) = (body.clone(), seen.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head);
                seen.lock()
                    .unwrap()
                    .push(text.lines().next().unwrap_or_default().to_string());
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/yaml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    Served { url, requests }
}
