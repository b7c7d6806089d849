//! A tenant who may create objects of a bound kind tries to choose where the flow acts (issue
//! #42, item 5): their object names another namespace, whose Secret a flow taking the copy's
//! source namespace from `${object.spec.from}` would copy into theirs with the flow's
//! ServiceAccount (which, as in a flow serving many namespaces, may read Secrets there). The
//! flow is refused before it serves any object, naming the field's path, and nothing is copied.
//! The one opt-in, for a copy's target, is told in the flow's status.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::Client;
use serde_json::json;

use crate::common::bound::*;
use crate::common::{apply, create_flow, eventually, flows, grant};

const CANARY: &str = "steer-canary-0c1f";

/// A namespace `{ns}-{suffix}` beside the tenant's `ns` (a victim's, or a copy's target); its name.
async fn beside(client: &Client, ns: &str, suffix: &str) -> String {
    let name = format!("{ns}-{suffix}");
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await;
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_objects_namespace_never_chooses_where_a_copy_reads_the_flow_is_refused_naming_the_path()
{
    let (client, ns) = setup("bind-steer", all_verbs()).await;
    // The victim: a namespace whose Secret the flow's ServiceAccount may read.
    let victim = beside(&client, &ns, "victim").await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-admin", "namespace": victim}, "stringData": {"password": CANARY}}),
    )
    .await;
    for at in [&victim, &ns] {
        grant(
            &client,
            &ns,
            at,
            "secrets",
            json!(["get", "create", "patch"]),
        )
        .await;
    }
    create_flow(&client, &ns, "sync", json!({
        "serviceAccountName": "flow",
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "record": "Child"},
        "steps": [{"type": "copy", "name": "share",
            "from": {"kind": "Secret", "name": "db-admin", "namespace": "${object.spec.from}"},
            "to": [{"namespace": "${object.metadata.namespace}", "name": "${object.metadata.name}-copy"}]}]}))
    .await;
    create_widget(&client, &ns, "w", json!({"version": "one", "from": victim})).await;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let status = || async {
        flows(&client, &ns)
            .get("sync")
            .await
            .map(|f| f.data["status"].clone())
            .unwrap_or_default()
    };
    eventually(
        90,
        "the flow refused (or the victim's Secret copied)",
        || async {
            status().await["reason"] == "InvalidSpec"
                || secrets.get_opt("w-copy").await.unwrap().is_some()
        },
    )
    .await;
    let st = status().await;
    assert_eq!(st["reason"], "InvalidSpec", "{st:#}");
    let message = st["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.steps[0].from.namespace") && message.contains("object.spec.from"),
        "{message}"
    );
    // Given the time a run takes, the copy would be there by now.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert!(
        secrets.get_opt("w-copy").await.unwrap().is_none(),
        "the victim's Secret was copied into the tenant's namespace"
    );
}

/// The opt-in seed 002's SecSynch uses: `allowObjectData: [targetNamespace]` lets the object
/// choose where a `copy` writes, and the flow's status says so (a warning naming the path),
/// while the copy still lands only where the flow's ServiceAccount may write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_target_taken_from_the_object_when_allowed_is_told_in_status_and_copies() {
    let (client, ns) = setup("bind-steer-ok", all_verbs()).await;
    let target = beside(&client, &ns, "t").await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "shared", "namespace": ns}, "stringData": {"k": "v"}}),
    )
    .await;
    for (at, verbs) in [
        (&ns, json!(["get"])),
        (&target, json!(["get", "create", "patch"])),
    ] {
        grant(&client, &ns, at, "secrets", verbs).await;
    }
    create_flow(
        &client,
        &ns,
        "sync",
        json!({
        "serviceAccountName": "flow",
        "allowObjectData": ["targetNamespace"],
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "record": "Child"},
        "steps": [{"type": "copy", "name": "share",
            "from": {"kind": "Secret", "name": "shared"},
            "to": [{"namespace": "${object.spec.to}"}]}]}),
    )
    .await;
    create_widget(&client, &ns, "w", json!({"version": "one", "to": target})).await;
    let copies: Api<Secret> = Api::namespaced(client.clone(), &target);
    eventually(
        120,
        "the copy in the namespace the object names",
        || async { copies.get_opt("shared").await.unwrap().is_some() },
    )
    .await;
    let st = flows(&client, &ns).get("sync").await.unwrap().data["status"].clone();
    let warnings = st["warnings"].as_array().cloned().unwrap_or_default();
    assert!(
        warnings.iter().any(|w| w.as_str().is_some_and(|w| w
            .starts_with("spec.steps[0].to[0].namespace: ${object.spec.to} takes the namespace")
            && w.contains("spec.allowObjectData: [targetNamespace]"))),
        "{st:#}"
    );
}

/// What the compiler cannot see: an `applyFile` artifact is read at run time. Its object's
/// namespace read straight from the bound object (`namespace: ${object.spec.ns}`) fails the
/// step naming the body's field; nothing is written in the namespace the tenant named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifacts_namespace_taken_from_the_object_fails_the_step_and_writes_nothing_there() {
    let (client, ns) = setup("bind-steer-art", all_verbs()).await;
    let victim = beside(&client, &ns, "victim").await;
    grant(
        &client,
        &ns,
        &victim,
        "configmaps",
        json!(["get", "create", "patch"]),
    )
    .await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "arts", "namespace": ns},
        "data": {"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-planted\n  namespace: ${object.spec.ns}\n"}}))
    .await;
    create_flow(
        &client,
        &ns,
        "art",
        json!({
        "serviceAccountName": "flow",
        "artifacts": [{"configMap": "arts"}],
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "record": "Child"},
        "steps": [{"type": "applyFile", "path": "app.yaml"}]}),
    )
    .await;
    create_widget(&client, &ns, "w", json!({"version": "one", "ns": victim})).await;
    let planted = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &victim);
    let failure = || async {
        flows(&client, &ns).get("art").await.unwrap().data["status"]["bound"]["failures"][0]
            ["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    eventually(
        120,
        "the step failed (or the ConfigMap planted)",
        || async {
            !failure().await.is_empty() || planted.get_opt("w-planted").await.unwrap().is_some()
        },
    )
    .await;
    assert!(
        planted.get_opt("w-planted").await.unwrap().is_none(),
        "the artifact's object was written in the namespace the tenant named"
    );
    let message = failure().await;
    assert!(
        message.contains("app.yaml[0].metadata.namespace") && message.contains("tenant data"),
        "{message}"
    );
}
