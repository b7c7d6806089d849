//! A user with `view` in the flow's namespace (ConfigMaps, pods and their logs, Events, flows)
//! must never read what came from a Secret: steps included from a `secretRef`, and the values
//! those steps carry. A canary planted in such a Secret is searched for everywhere `view` reaches.

use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Api, ListParams, LogParams};
use serde_json::json;

use crate::common::flows;
use crate::common::harness::{apply, create_flow, setup_with, wait_done};

const CANARY: &str = "canary-7f3a9c51e2";

#[tokio::test]
async fn content_included_from_a_secret_never_reaches_what_view_can_read() {
    let (client, ns) = setup_with(
        "secret-canary",
        json!([
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]},
        ]),
    )
    .await;
    // The included steps carry the canary as parameters: in an object they apply (a Secret, so
    // the output is protected too) and in a variable.
    let steps = format!(
        "- type: apply\n  manifests: |\n    apiVersion: v1\n    kind: Secret\n    metadata: {{name: out, namespace: {ns}}}\n    stringData: {{token: {CANARY}}}\n- type: eval\n  var: token\n  expression: \"'{CANARY}'\"\n"
    );
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "private-steps", "namespace": ns}, "stringData": {"steps.yaml": steps}}),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "uses-secret",
        json!({
            "serviceAccountName": "flow",
            "steps": [
                {"type": "include", "source": {"secretRef": {"name": "private-steps", "key": "steps.yaml"}}},
                {"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: after, namespace: {ns}}}\n")},
            ],
        }),
    )
    .await;
    let status = wait_done(&client, &ns, "uses-secret").await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");

    let mut leaks = Vec::new();
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(cms.items.len() >= 2, "the run's ConfigMaps are listed");
    for cm in cms.items {
        if serde_json::to_string(&cm).unwrap().contains(CANARY) {
            leaks.push(format!(
                "ConfigMap {}",
                cm.metadata.name.unwrap_or_default()
            ));
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let listed = pods.list(&ListParams::default()).await.unwrap().items;
    assert!(listed.len() >= 3, "the step pods are listed");
    for pod in listed {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if serde_json::to_string(&pod.status).unwrap().contains(CANARY) {
            leaks.push(format!("status of pod {name}"));
        }
        let log = pods
            .logs(&name, &LogParams::default())
            .await
            .unwrap_or_default();
        if log.contains(CANARY) {
            leaks.push(format!("log of pod {name}"));
        }
    }
    for ev in Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        if serde_json::to_string(&ev).unwrap().contains(CANARY) {
            leaks.push(format!("Event {}", ev.reason.unwrap_or_default()));
        }
    }
    let flow = flows(&client, &ns).get("uses-secret").await.unwrap();
    if flow.data["status"].to_string().contains(CANARY) {
        leaks.push("the flow's status".into());
    }
    assert!(leaks.is_empty(), "the canary leaked into: {leaks:?}");
}
