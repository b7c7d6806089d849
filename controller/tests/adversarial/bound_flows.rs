//! Attacks on flows bound to a kind, end to end on testenv with the controller holding the
//! chart's ClusterRole only: a flow of a child's name made by someone else, or planted with the
//! bound-to label, a forged controller owner reference and the object's UID, is never adopted;
//! an object too deep to decode is named in the status and the others are served and deleted;
//! a tenant's shell syntax in an object is echoed as data by a `v1beta1` flow (the opt-out is
//! told in status and an Event), while a `v1alpha1` flow keeps splicing as written, warned.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use pseudoflow_controller::bind::child::child_name;
use serde_json::{json, Value};

use crate::common;
use crate::common::bound::*;
use crate::common::{apply, create_flow, eventually, flows, wait_status};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_too_deep_to_decode_fails_alone_and_the_others_are_served_and_deleted() {
    let (client, ns) = setup("bind-deep", all_verbs()).await;
    create_flow(&client, &ns, "widgets", widget_flow(json!({}))).await;
    // 130 levels: past serde_json's recursion limit, so no typed client reads it back; sent
    // and created as text.
    let nested = format!("{}1{}", "{\"a\":".repeat(130), "}".repeat(130));
    let body = format!(
        r#"{{"apiVersion":"{GROUP}/v1","kind":"Widget","metadata":{{"name":"deep","namespace":"{ns}"}},"spec":{{"version":"one","deep":{nested}}}}}"#
    );
    let url = widgets(&client, &ns).resource_url().to_string();
    let request = kube::core::Request::new(url)
        .create(&PostParams::default(), body.into_bytes())
        .unwrap();
    client.request_text(request).await.unwrap();
    create_widget(&client, &ns, "ok", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "ok", "Running").await;
    let status = wait_status(&client, &ns, "widgets", 60, "the deep one named", |s| {
        s["bound"]["failures"][0]["object"] == format!("{ns}/deep") && s["bound"]["running"] == 1
    })
    .await;
    assert_eq!(status["reason"], "Bound", "{status:#}");
    let message = status["bound"]["failures"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.deep.a") && message.contains("nested deeper than"),
        "{message}"
    );
    // Deleting the served one completes: its flow goes, then our finalizer.
    widgets(&client, &ns)
        .delete("ok", &DeleteParams::default())
        .await
        .unwrap();
    eventually(60, "the served object gone", || async {
        widgets(&client, &ns).get_opt("ok").await.unwrap().is_none()
    })
    .await;
    assert!(
        config_map_exists(&client, &ns, "ok-farewell").await,
        "its onDelete ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_of_the_childs_name_made_by_someone_else_is_not_adopted() {
    let (client, ns) = setup("bind-squat", all_verbs()).await;
    let squat = child_name("widgets", &ns, "w");
    create_flow(
        &client,
        &ns,
        &squat,
        json!({"suspend": true, "steps": [{"type": "log", "message": "mine"}]}),
    )
    .await;
    create_flow(&client, &ns, "widgets", widget_flow(json!({}))).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    let status = wait_status(&client, &ns, "widgets", 60, "the object refused", |s| {
        s["bound"]["failed"] == 1
    })
    .await;
    let message = status["bound"]["failures"][0]["message"].as_str().unwrap();
    assert!(message.contains("not adopted"), "{message}");
    let f = flows(&client, &ns).get(&squat).await.unwrap();
    assert!(
        f.data["spec"].get("bound").is_none(),
        "the squatter's spec is untouched"
    );
    let w = widgets(&client, &ns).get("w").await.unwrap();
    assert!(
        w.metadata.finalizers.unwrap_or_default().is_empty(),
        "no finalizer without a flow"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_planted_under_the_childs_name_with_a_forged_owner_is_not_adopted() {
    let (client, ns) = setup("bind-forged", all_verbs()).await;
    create_flow(
        &client,
        &ns,
        "widgets",
        widget_flow(json!({"selector": "tier=served"})),
    )
    .await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    let parent = flows(&client, &ns).get("widgets").await.unwrap();
    let w = widgets(&client, &ns).get("w").await.unwrap();
    // Everything a planter can read or write: the label, a controller owner reference naming
    // the bound flow, the object's UID and name recorded as the controller records them.
    let squat = child_name("widgets", &ns, "w");
    let planted: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "metadata": {"name": squat, "namespace": ns,
            "labels": {"ops.example.com/bound-to": "widgets"},
            "annotations": {"ops.example.com/bound-object": format!("{ns}/w")},
            "ownerReferences": [{"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
                "name": "widgets", "uid": parent.metadata.uid, "controller": true}]},
        "spec": {"suspend": true, "steps": [{"type": "log", "message": "mine"}],
            "bound": {"plural": "widgets", "trigger": {"event": "create", "changed": []},
                "object": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
                    "metadata": {"name": "w", "namespace": ns, "uid": w.metadata.uid}}}}
    }))
    .unwrap();
    flows(&client, &ns)
        .create(&PostParams::default(), &planted)
        .await
        .unwrap();
    let label = json!({"metadata": {"labels": {"tier": "served"}}});
    widgets(&client, &ns)
        .patch("w", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let status = wait_status(
        &client,
        &ns,
        "widgets",
        60,
        "the planted flow refused",
        |s| s["bound"]["failed"] == 1,
    )
    .await;
    let message = status["bound"]["failures"][0]["message"].as_str().unwrap();
    assert!(message.contains("not adopted"), "{message}");
    assert!(message.contains(&squat), "{message}");
    let f = flows(&client, &ns).get(&squat).await.unwrap();
    assert_eq!(
        f.data["spec"]["steps"][0]["message"], "mine",
        "the planted flow's spec is not replaced by the bound flow's"
    );
    let w = widgets(&client, &ns).get("w").await.unwrap();
    assert!(
        w.metadata.finalizers.unwrap_or_default().is_empty(),
        "no finalizer for a flow not ours"
    );
    // Deleted, the object goes: nothing of ours holds it.
    widgets(&client, &ns)
        .delete("w", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "the object gone", || async {
        widgets(&client, &ns).get_opt("w").await.unwrap().is_none()
    })
    .await;
}

/// A `v1beta1` bound flow that echoes each of an object's users: `cmd: "echo hi ${item}"`.
/// Its last step opts out of quoting (`| raw`) for an object field, which must be told.
fn quoting_flow(ns: &str) -> Value {
    json!({"apiVersion": "ops.example.com/v1beta1", "kind": "PseudoFlow",
    "metadata": {"name": "greeter", "namespace": ns},
    "spec": {
        "serviceAccountName": "flow",
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget"},
        "steps": [
            {"type": "loop", "forEach": "${object.spec.users}", "steps": [
                {"type": "exec", "cmd": "echo hi ${item}", "var": "said"},
                {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "${object.metadata.name}-said-${index}"},
                    "data": {"said": "${said}"}}}
            ]},
            {"type": "exec", "cmd": "echo ${object.spec.flag | raw}"}
        ]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_shell_syntax_is_echoed_as_data_and_an_opt_out_is_told_in_status_and_an_event() {
    let (client, ns) = setup("bind-quote", all_verbs()).await;
    apply(&client, quoting_flow(&ns)).await;
    // Stored with the v1beta1 default, so read as v1alpha1 it still quotes.
    let stored = flows(&client, &ns).get("greeter").await.unwrap();
    assert_eq!(
        stored.data["spec"]["shellQuoting"], "quoted",
        "{:#}",
        stored.data
    );
    create_widget(
        &client,
        &ns,
        "w",
        json!({"version": "one", "users": ["x; id -u"], "flag": "-n"}),
    )
    .await;
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    eventually(120, "the user's greeting written", || async {
        cm.get_opt("w-said-0").await.unwrap().is_some()
    })
    .await;
    let said = cm.get("w-said-0").await.unwrap().data.unwrap()["said"].clone();
    assert_eq!(
        said, "hi x; id -u",
        "echo got one literal word; id did not run"
    );
    let status = wait_status(&client, &ns, "greeter", 60, "the opt-out told", |s| {
        s["warnings"].as_array().is_some_and(|w| !w.is_empty())
    })
    .await;
    let warning = status["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with("spec.steps[1].cmd: ${object.spec.flag | raw} opts out of quoting"),
        "{warning}"
    );
    let events = common::flow_events(&client, &ns, "greeter").await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("CompileWarnings")
                && e.message
                    .as_deref()
                    .unwrap_or_default()
                    .contains("opts out of quoting")),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha1_flow_keeps_splicing_as_written() {
    let (client, ns) = setup("bind-raw", all_verbs()).await;
    let mut flow = quoting_flow(&ns);
    flow["apiVersion"] = json!("ops.example.com/v1alpha1");
    flow["spec"]["steps"][0]["steps"][0]["cmd"] = json!("echo hi ${item}");
    apply(&client, flow).await;
    let stored = flows(&client, &ns).get("greeter").await.unwrap();
    assert_eq!(
        stored.data["spec"]["shellQuoting"], "raw",
        "{:#}",
        stored.data
    );
    create_widget(
        &client,
        &ns,
        "w",
        json!({"version": "one", "users": ["x; echo injected"], "flag": "-n"}),
    )
    .await;
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    eventually(120, "the greeting written", || async {
        cm.get_opt("w-said-0").await.unwrap().is_some()
    })
    .await;
    let said = cm.get("w-said-0").await.unwrap().data.unwrap()["said"].clone();
    assert_eq!(said, "hi x\ninjected", "v1alpha1 splices as it always did");
    let status = wait_status(&client, &ns, "greeter", 60, "the unquoted item told", |s| {
        s["warnings"].as_array().is_some_and(|w| !w.is_empty())
    })
    .await;
    assert!(
        status["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("spec.steps[0].steps[0].cmd: ${item} splices \"item\", tenant data"),
        "{status:#}"
    );
}
