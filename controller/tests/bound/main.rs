//! Flows bound to a kind (`spec.bind`, docs/bound-flows.md), on testenv: each object of the kind
//! gets its own flow, runs and status; status-only changes start nothing, watched fields do;
//! deleting an object (also mid-run) runs its `onDelete` before its finalizer goes; deleting the
//! bound flow lets the objects go; a ServiceAccount that may not watch the kind fails the flow
//! naming that right; `allNamespaces` needs a cluster-wide grant, then serves objects in any
//! namespace. The attacks on bound flows (a squatted or planted child, an object too deep to
//! decode, tenant data spliced into a shell) are in `adversarial/bound_flows.rs`; flows recorded
//! in their objects (`bind.record: Object`, no child flow) in `in_object.rs`, the seal on their
//! served mark against a tenant's edits in `sealed_mark.rs`.
//!
//! The controller runs with the chart's ClusterRole only (a token of a ServiceAccount bound to
//! it, `pseudoflow_test_support::bound`): it holds no rights on the kind, so everything done to
//! the objects is done as the flow's ServiceAccount, by impersonation.

use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use pseudoflow_controller::bind::child::child_name;
use serde_json::{json, Value};

use pseudoflow_test_support as common;

/// The same, recorded in the objects (`bind.record: Object`).
mod in_object;
/// A command in another pod in a flow recorded in its objects: once, under a sealed record.
mod in_object_exec;
/// `bind.related` followed by a flow recorded in its objects.
mod in_object_related;
/// A bound flow's revisions (ControllerRevisions), under both ways of recording.
mod revisions;
/// A bound flow's revision rolled out to its objects in waves, stopping on failure.
mod rollout;
/// At most 512 object runs of a flow recorded in its objects at once; the rest wait their turn.
mod run_cap;
/// The served mark sealed by a controller holding the approval key: forged ones not believed.
mod sealed_mark;
/// `${object.status}` read by runs, never starting one, under both ways of recording.
mod status;

use common::bound::*;
use common::{apply, create_flow, eventually, flows, wait_status};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_object_gets_its_own_run_and_status_and_one_failure_blocks_no_other() {
    let (client, ns) = setup("bind-two", all_verbs()).await;
    create_flow(&client, &ns, "widgets", widget_flow(json!({}))).await;
    create_widget(&client, &ns, "good", json!({"version": "one"})).await;
    create_widget(&client, &ns, "bad", json!({"version": "NOT_A_NAME"})).await;
    let good = wait_widget(&client, &ns, "good", "Running").await;
    assert_eq!(good["made"], "good-made", "{good:#}");
    let ready = good["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(
        (
            ready["status"].as_str(),
            ready["observedGeneration"].as_i64()
        ),
        (Some("True"), Some(1))
    );
    assert!(config_map_exists(&client, &ns, "good-made-one").await);
    assert!(config_map_exists(&client, &ns, "good-created").await);
    let bad = wait_widget(&client, &ns, "bad", "Failed").await;
    assert!(
        bad["message"].as_str().unwrap_or_default().contains("made"),
        "{bad:#}"
    );
    let status = wait_status(&client, &ns, "widgets", 60, "both objects summed up", |s| {
        s["bound"]["running"] == 1 && s["bound"]["failed"] == 1
    })
    .await;
    assert_eq!(status["bound"]["objects"], 2, "{status:#}");
    assert_eq!(
        status["bound"]["failures"][0]["object"],
        format!("{ns}/bad")
    );
    let w = widgets(&client, &ns).get("good").await.unwrap();
    let fins = w.metadata.finalizers.unwrap_or_default();
    assert!(
        fins.iter()
            .any(|f| f.starts_with("ops.example.com/flow-widgets-")),
        "{fins:?}"
    );
}

/// The run id of the child flow serving widget `w`.
async fn child_run(client: &Client, ns: &str, w: &str) -> String {
    let child = child_name("widgets", ns, w);
    flows(client, ns).get(&child).await.unwrap().data["status"]["run"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_only_change_starts_no_run_and_a_watched_field_does() {
    let (client, ns) = setup("bind-watch", all_verbs()).await;
    let flow = widget_flow(json!({"watchFields": [".metadata.annotations.password"]}));
    create_flow(&client, &ns, "widgets", flow).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    let first = child_run(&client, &ns, "w").await;
    // A status write and a label: nothing the flow watches.
    let api = widgets(&client, &ns);
    let status = json!({"status": {"note": "written by someone else"}});
    api.patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let label = json!({"metadata": {"labels": {"team": "a"}}});
    api.patch("w", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        child_run(&client, &ns, "w").await,
        first,
        "no run for a status or label change"
    );
    // The watched annotation: a run, told it was an update of that path.
    let pw = json!({"metadata": {"annotations": {"password": "new"}}});
    api.patch("w", &PatchParams::default(), &Patch::Merge(&pw))
        .await
        .unwrap();
    eventually(60, "a new run", || async {
        child_run(&client, &ns, "w").await != first
    })
    .await;
    let child = flows(&client, &ns)
        .get(&child_name("widgets", &ns, "w"))
        .await
        .unwrap();
    let trigger = &child.data["spec"]["bound"]["trigger"];
    assert_eq!(
        trigger,
        &json!({"event": "update", "changed": [".metadata.annotations.password"]})
    );
    wait_widget(&client, &ns, "w", "Running").await;
    let status = wait_status(
        &client,
        &ns,
        &child_name("widgets", &ns, "w"),
        60,
        "done",
        |s| s["phase"] == "Succeeded",
    )
    .await;
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
        .get("w-made-one")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["event"], "update", "{status:#}");
    // The create-only step ran for no item this time.
    let on_create = status["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "on create only")
        .unwrap();
    assert_eq!(on_create["phase"], "Succeeded", "{on_create:#}");
    assert!(
        status["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["path"] != "spec.steps[1].steps[0]" || s["phase"] != "Succeeded"),
        "{status:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_object_runs_its_on_delete_then_lets_it_go() {
    let (client, ns) = setup("bind-delete", all_verbs()).await;
    create_flow(&client, &ns, "widgets", widget_flow(json!({}))).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    assert!(!config_map_exists(&client, &ns, "w-farewell").await);
    let api = widgets(&client, &ns);
    api.delete("w", &DeleteParams::default()).await.unwrap();
    eventually(90, "the widget gone", || async {
        api.get_opt("w").await.unwrap().is_none()
    })
    .await;
    assert!(
        config_map_exists(&client, &ns, "w-farewell").await,
        "onDelete ran before the object went"
    );
    let child = child_name("widgets", &ns, "w");
    eventually(30, "its flow gone", || async {
        flows(&client, &ns).get_opt(&child).await.unwrap().is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_bound_flow_removes_its_finalizers_and_runs_no_on_delete() {
    let (client, ns) = setup("bind-unbind", all_verbs()).await;
    create_flow(&client, &ns, "widgets", widget_flow(json!({}))).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    delete_bound_flow(&client, &ns).await;
    let w = widgets(&client, &ns).get("w").await.unwrap();
    assert!(
        !w.metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f.starts_with("ops.example.com/")),
        "the object keeps none of our finalizers"
    );
    let child = child_name("widgets", &ns, "w");
    eventually(30, "its flow gone", || async {
        flows(&client, &ns).get_opt(&child).await.unwrap().is_none()
    })
    .await;
    assert!(
        !config_map_exists(&client, &ns, "w-farewell").await,
        "no onDelete ran"
    );
    assert!(
        config_map_exists(&client, &ns, "w-made-one").await,
        "what the run made stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_that_may_not_watch_the_kind_fails_naming_the_right() {
    let (client, ns) = setup("bind-norights", json!(["get", "list", "patch"])).await;
    create_flow(&client, &ns, "widgets", widget_flow(json!({}))).await;
    let status = wait_status(&client, &ns, "widgets", 60, "refused", |s| {
        s["phase"] == "Failed"
    })
    .await;
    assert_eq!(status["reason"], "BindRefused", "{status:#}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "ServiceAccount {ns}/flow may not watch widgets.{GROUP} in namespace {ns}"
        )),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_deleted_mid_run_has_its_run_stopped_then_its_on_delete_run() {
    let (client, ns) = setup("bind-midrun", all_verbs()).await;
    let mut flow = widget_flow(json!({}));
    flow["steps"] = json!([{"type": "sleep", "name": "long", "seconds": 600}]);
    create_flow(&client, &ns, "widgets", flow).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Creating").await;
    let child = child_name("widgets", &ns, "w");
    wait_status(&client, &ns, &child, 60, "sleeping", |s| {
        s["currentStep"]
            .as_str()
            .is_some_and(|c| c.contains("long"))
    })
    .await;
    let api = widgets(&client, &ns);
    api.delete("w", &DeleteParams::default()).await.unwrap();
    eventually(
        90,
        "the widget gone long before its run would end",
        || async { api.get_opt("w").await.unwrap().is_none() },
    )
    .await;
    assert!(
        config_map_exists(&client, &ns, "w-farewell").await,
        "onDelete ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_the_bound_flow_runs_each_object_again_with_the_new_spec() {
    let (client, ns) = setup("bind-edit", all_verbs()).await;
    let mut flow = widget_flow(json!({}));
    flow["vars"] = json!({"color": "red", "dropped": "x"});
    flow["steps"][0]["manifests"] = json!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-color\ndata:\n  color: ${color}\n");
    create_flow(&client, &ns, "widgets", flow.clone()).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    let first = child_run(&client, &ns, "w").await;
    flow["vars"] = json!({"color": "blue"});
    create_flow(&client, &ns, "widgets", flow).await;
    eventually(60, "a new run", || async {
        child_run(&client, &ns, "w").await != first
    })
    .await;
    let child = child_name("widgets", &ns, "w");
    wait_status(&client, &ns, &child, 60, "done", |s| {
        s["phase"] == "Succeeded"
    })
    .await;
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
        .get("w-color")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["color"], "blue");
    let spec = flows(&client, &ns).get(&child).await.unwrap().data["spec"].clone();
    assert_eq!(
        spec["vars"],
        json!({"color": "blue"}),
        "a dropped var is gone from the child"
    );
    assert_eq!(
        spec["bound"]["trigger"],
        json!({"event": "update", "changed": []})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_flow_broken_by_an_edit_still_lets_its_objects_go_when_deleted() {
    let (client, ns) = setup("bind-broken", all_verbs()).await;
    let mut flow = widget_flow(json!({}));
    create_flow(&client, &ns, "widgets", flow.clone()).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    flow["steps"] = json!([{"type": "log", "message": "${nope.x}"}]);
    create_flow(&client, &ns, "widgets", flow).await;
    wait_status(&client, &ns, "widgets", 60, "invalid", |s| {
        s["reason"] == "InvalidSpec"
    })
    .await;
    delete_bound_flow(&client, &ns).await;
    let w = widgets(&client, &ns).get("w").await.unwrap();
    assert!(w.metadata.finalizers.unwrap_or_default().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_without_status_is_served_when_nothing_is_written_back_and_the_selector_holds() {
    let (client, ns) = setup("bind-cm", json!(["get"])).await;
    // ConfigMaps: no status subresource, no generation; only those labelled bound=yes.
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "patch"]}]);
    apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "flow", "namespace": ns}, "rules": rules}),
    )
    .await;
    create_flow(&client, &ns, "cms", json!({
        "serviceAccountName": "flow",
        "bind": {"apiVersion": "v1", "kind": "ConfigMap", "selector": "bound=yes",
            "status": {"phaseField": "", "conditions": false}},
        "steps": [{"type": "apply", "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-seen\ndata:\n  k: ${object.data.k}\n"}]
    })).await;
    let cm = |name: &str, k: &str, labelled: bool| {
        let labels = if labelled {
            json!({"bound": "yes"})
        } else {
            json!({})
        };
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": {"k": k}})
    };
    apply(&client, cm("src", "1", true)).await;
    apply(&client, cm("other", "1", false)).await;
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    let seen = |v: &'static str| {
        let cms = cms.clone();
        async move {
            cms.get_opt("src-seen")
                .await
                .unwrap()
                .and_then(|c| c.data)
                .is_some_and(|d| d["k"] == v)
        }
    };
    eventually(60, "src served", || seen("1")).await;
    apply(&client, cm("src", "2", true)).await;
    eventually(60, "a change of its data served", || seen("2")).await;
    let status = wait_status(&client, &ns, "cms", 60, "summed up", |s| {
        s["bound"]["running"] == 1
    })
    .await;
    assert_eq!(
        status["bound"]["objects"], 1,
        "the unlabelled one is not served: {status:#}"
    );
    assert!(!config_map_exists(&client, &ns, "other-seen").await);
    let child = child_name("cms", &ns, "src");
    let events = common::flow_events(&client, &ns, &child).await;
    assert!(events
        .iter()
        .all(|e| e.reason.as_deref() != Some("StatusWriteFailed")));
}

/// A bound flow over widgets whose objects name a ConfigMap (`spec.config`, `bind.related`): its
/// one step writes ConfigMap `<widget>-seen` holding what started the run.
fn related_flow() -> Value {
    related_flow_of("ConfigMap", "${object.spec.config}")
}

/// [`related_flow`] with a reference to a `kind` named `name`, recorded in a child flow per
/// object (unset, `record` would be `Object`: its one step runs in the controller; the same
/// flow recorded in its objects is in `in_object.rs`).
fn related_flow_of(kind: &str, name: &str) -> Value {
    json!({
        "serviceAccountName": "flow",
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "record": "Child",
            "related": [{"apiVersion": "v1", "kind": kind, "name": name}]},
        "steps": [
            {"type": "apply", "name": "seen", "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-seen\ndata:\n  event: ${trigger.event}\n  changed: \"${trigger.changed | join(',')}\"\n"}
        ]
    })
}

/// The data of ConfigMap `name` (empty when absent).
async fn config_map_data(client: &Client, ns: &str, name: &str) -> Value {
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap();
    json!(cm.and_then(|c| c.data).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_related_objects_content_change_starts_a_run_naming_it_as_the_service_account() {
    // The flow's account may get and list ConfigMaps but not watch them: refused, naming it.
    let (client, ns) = setup("bind-related", all_verbs()).await;
    create_flow(&client, &ns, "widgets", related_flow()).await;
    let status = wait_status(&client, &ns, "widgets", 60, "refused", |s| {
        s["phase"] == "Failed"
    })
    .await;
    assert_eq!(status["reason"], "BindRefused", "{status:#}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "ServiceAccount {ns}/flow may not watch configmaps in namespace {ns}; a bound flow \
             reads and watches its related objects (bind.related)"
        )),
        "{message}"
    );

    // Granted, the binding is tried again and serves the widget.
    apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "watch-configmaps", "namespace": ns},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["watch"]}]}),
    )
    .await;
    bind_role(&client, &ns, "watch-configmaps").await;
    let settings = |data: Value, labels: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": ns, "labels": labels}, "data": data})
    };
    apply(&client, settings(json!({"a": "1"}), json!({}))).await;
    create_widget(&client, &ns, "w", json!({"config": "settings"})).await;
    eventually(90, "the widget's first run", || async {
        config_map_data(&client, &ns, "w-seen").await["event"] == "create"
    })
    .await;
    wait_widget(&client, &ns, "w", "Running").await;
    let first = child_run(&client, &ns, "w").await;
    let child = flows(&client, &ns)
        .get(&child_name("widgets", &ns, "w"))
        .await
        .unwrap();
    let recorded = &child.data["spec"]["bound"]["related"];
    assert!(recorded["ConfigMap/settings"].is_string(), "{recorded}");
    assert!(
        !child.data["spec"].to_string().contains("\"a\":\"1\""),
        "the child records versions, never content"
    );

    // A label on the related object is metadata: no run.
    apply(&client, settings(json!({"a": "1"}), json!({"x": "y"}))).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        child_run(&client, &ns, "w").await,
        first,
        "a label starts no run"
    );

    // A change of its content starts one within seconds (the watch, not the resync), naming it.
    apply(&client, settings(json!({"a": "2"}), json!({"x": "y"}))).await;
    let started = std::time::Instant::now();
    eventually(20, "a run for the related change", || async {
        let seen = config_map_data(&client, &ns, "w-seen").await;
        seen["event"] == "update" && seen["changed"] == "ConfigMap/settings"
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(20));
    // The step runs in the controller (a bound flow's API steps do), so its ConfigMap can be
    // there a moment before the child's status names the new run.
    eventually(10, "the child's status naming the new run", || async {
        child_run(&client, &ns, "w").await != first
    })
    .await;
}

/// Lets `ns`'s flows' ServiceAccount `flow` list and watch Secrets there but get only Secret
/// `shared` (Role and RoleBinding `secrets`); the controller itself may get every Secret (the
/// chart's ClusterRole), so a read with its rights would succeed.
async fn may_get_only_shared_secret(client: &Client, ns: &str) {
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "secrets", "namespace": ns},
            "rules": [
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                    "resourceNames": ["shared"]}]}),
    )
    .await;
    bind_role(client, ns, "secrets").await;
}

/// Binds Role `role` of `ns` to the flows' ServiceAccount `flow`.
async fn bind_role(client: &Client, ns: &str, role: &str) {
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]}),
    )
    .await;
}

/// Lets `ns`'s flows' ServiceAccount `flow` get, list and watch every Secret there.
async fn may_read_secrets(client: &Client, ns: &str) {
    common::grant(client, ns, ns, "secrets", json!(["get", "list", "watch"])).await;
}

/// Deletes bound flow `widgets` and waits until it is gone (our finalizer off it).
async fn delete_bound_flow(client: &Client, ns: &str) {
    flows(client, ns)
        .delete("widgets", &DeleteParams::default())
        .await
        .unwrap();
    eventually(60, "the bound flow gone", || async {
        flows(client, ns)
            .get_opt("widgets")
            .await
            .unwrap()
            .is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn related_objects_are_read_by_name_as_the_service_account_never_the_controller() {
    // The account may list and watch Secrets, but get only `shared`; the controller itself may
    // get every Secret (the chart's ClusterRole), so a read with its rights would succeed.
    let (client, ns) = setup("bind-related-get", all_verbs()).await;
    may_get_only_shared_secret(&client, &ns).await;
    for name in ["shared", "private"] {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": ns}, "stringData": {"k": "v"}}),
        )
        .await;
    }
    create_flow(
        &client,
        &ns,
        "widgets",
        related_flow_of("Secret", "${object.spec.secret}"),
    )
    .await;
    create_widget(&client, &ns, "allowed", json!({"secret": "shared"})).await;
    create_widget(&client, &ns, "denied", json!({"secret": "private"})).await;
    wait_widget(&client, &ns, "allowed", "Running").await;
    let status = wait_status(&client, &ns, "widgets", 60, "denied refused", |s| {
        s["bound"]["failures"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["object"] == format!("{ns}/denied")))
    })
    .await;
    let failure = status["bound"]["failures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["object"] == format!("{ns}/denied"))
        .unwrap();
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "spec.bind.related[0] (Secret/private): ServiceAccount {ns}/flow may not get \
             secrets in namespace {ns}"
        )),
        "{message}"
    );
    // Refused before anything runs: no flow, no finalizer, no run.
    let child = flows(&client, &ns)
        .get_opt(&child_name("widgets", &ns, "denied"))
        .await
        .unwrap();
    assert!(child.is_none(), "no flow for the denied widget");
    assert!(!config_map_exists(&client, &ns, "denied-seen").await);
    assert!(config_map_exists(&client, &ns, "allowed-seen").await);
}

/// `allNamespaces: true` serves objects in every namespace, but only with a cluster-wide grant:
/// the namespace's own rights are not enough (the flow is refused, naming the cluster-wide
/// right), and once a ClusterRole is bound to the ServiceAccount an object in another namespace
/// is served, its child flow kept in the bound flow's namespace and its status written back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_namespaces_needs_a_cluster_wide_grant_then_serves_objects_anywhere() {
    let (client, ns) = setup("bind-allns", all_verbs()).await;
    let other = format!("{ns}-elsewhere");
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}),
    )
    .await;
    // Every test of this binary shares the cluster and the Widget kind: a flow serving widgets
    // in every namespace must select only this test's, or it serves (and writes the status of)
    // the widgets of tests running beside it.
    let mut far = widget().object(&other, "far", json!({"version": "one"}));
    far["metadata"]["labels"] = json!({"test": ns});
    apply(&client, far).await;
    let only_this_test = json!({"allNamespaces": true,
        "selector": {"matchLabels": {"test": ns}}});
    create_flow(&client, &ns, "widgets", widget_flow(only_this_test)).await;
    let status = wait_status(&client, &ns, "widgets", 60, "refused", |s| {
        s["phase"] == "Failed"
    })
    .await;
    assert_eq!(status["reason"], "BindRefused", "{status:#}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("ServiceAccount {ns}/flow may not"))
            && message.contains("cluster-wide"),
        "{message}"
    );
    assert!(
        widget_status(&client, &other, "far").await.is_null(),
        "nothing written to an object the flow may not serve"
    );

    // The cluster-wide grant: the refused binding is tried again and serves the object.
    let role = format!("widgets-everywhere-{ns}");
    apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": role}, "rules": [
                {"apiGroups": [GROUP], "resources": ["widgets"], "verbs": all_verbs()},
                {"apiGroups": [GROUP], "resources": ["widgets/status"], "verbs": ["patch"]}]}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]}),
    )
    .await;
    let far = wait_widget(&client, &other, "far", "Running").await;
    assert_eq!(far["made"], "far-made", "{far:#}");
    // Its flow lives beside the bound flow, and ran there.
    let child = child_name("widgets", &other, "far");
    assert!(flows(&client, &ns).get_opt(&child).await.unwrap().is_some());
    assert!(config_map_exists(&client, &ns, "far-made-one").await);
    let finalizers = widgets(&client, &other)
        .get("far")
        .await
        .unwrap()
        .metadata
        .finalizers
        .unwrap_or_default();
    assert!(
        finalizers
            .iter()
            .any(|f| f.starts_with("ops.example.com/flow-")),
        "{finalizers:?}"
    );
}

/// A flow `name` bound to widgets as ServiceAccount `sa`, writing no status (the flows of the
/// test below share the objects): it applies ConfigMap `<widget>-<name>` holding the widget's
/// `spec.version`.
fn sharing_flow(name: &str, sa: &str) -> Value {
    json!({
        "serviceAccountName": sa,
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
            "status": {"phaseField": "", "conditions": false}},
        "steps": [{"type": "apply", "manifests": format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${{object.metadata.name}}-{name}\ndata:\n  version: ${{object.spec.version}}\n")}]
    })
}

/// The version ConfigMap `<widget>-<flow>` holds (None: not made yet).
async fn version_by(client: &Client, ns: &str, widget: &str, flow: &str) -> Option<String> {
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&format!("{widget}-{flow}"))
        .await
        .unwrap()
        .and_then(|c| c.data?.get("version").cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_on_one_kind_as_one_service_account_share_one_watch_and_each_is_woken_by_it() {
    let (client, ns, ctx) = setup_with_context("bind-share", all_verbs()).await;
    // A second account with the same rights: its flows watch on their own.
    apply(&client, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "other", "namespace": ns}})).await;
    apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "other", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flow"},
        "subjects": [{"kind": "ServiceAccount", "name": "other", "namespace": ns}]}),
    )
    .await;
    let watches = &ctx.binder.watches;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    create_flow(&client, &ns, "s1", sharing_flow("s1", "flow")).await;
    create_flow(&client, &ns, "s2", sharing_flow("s2", "flow")).await;
    for flow in ["s1", "s2"] {
        eventually(60, &format!("{flow} serves w"), || async {
            version_by(&client, &ns, "w", flow).await.as_deref() == Some("one")
        })
        .await;
    }
    assert_eq!(
        watches.count(),
        1,
        "two flows, one kind, one account: one watch"
    );
    create_flow(&client, &ns, "s3", sharing_flow("s3", "other")).await;
    eventually(60, "s3 serves w", || async {
        version_by(&client, &ns, "w", "s3").await.as_deref() == Some("one")
    })
    .await;
    assert_eq!(
        watches.count(),
        2,
        "another account watches with its own rights"
    );

    // One event on the shared watch reaches both flows at once (not the 5-minute resync).
    apply(
        &client,
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
        "metadata": {"name": "w", "namespace": ns}, "spec": {"version": "two"}}),
    )
    .await;
    for flow in ["s1", "s2", "s3"] {
        eventually(30, &format!("{flow} serves w's edit"), || async {
            version_by(&client, &ns, "w", flow).await.as_deref() == Some("two")
        })
        .await;
    }

    // The first subscriber leaving does not stop the watch the second still uses.
    flows(&client, &ns)
        .delete("s1", &DeleteParams::default())
        .await
        .unwrap();
    eventually(60, "s1 gone", || async {
        flows(&client, &ns).get_opt("s1").await.unwrap().is_none()
    })
    .await;
    assert_eq!(watches.count(), 2, "s2 still watches as flow");
    apply(
        &client,
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
        "metadata": {"name": "w", "namespace": ns}, "spec": {"version": "three"}}),
    )
    .await;
    eventually(30, "s2 serves w's second edit", || async {
        version_by(&client, &ns, "w", "s2").await.as_deref() == Some("three")
    })
    .await;
    let by_s1 = version_by(&client, &ns, "w", "s1").await;
    assert_ne!(
        by_s1.as_deref(),
        Some("three"),
        "s1 is gone and served nothing more"
    );
    for flow in ["s2", "s3"] {
        flows(&client, &ns)
            .delete(flow, &DeleteParams::default())
            .await
            .unwrap();
    }
    eventually(60, "no watch left", || async { watches.count() == 0 }).await;
}

/// The run ids of the Jobs flow `flow` left in `ns`.
async fn job_runs(client: &Client, ns: &str, flow: &str) -> std::collections::BTreeSet<String> {
    let lp = kube::api::ListParams::default().labels(&format!("ops.example.com/flow={flow}"));
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|j| {
            j.metadata
                .labels
                .as_ref()?
                .get("ops.example.com/run")
                .cloned()
        })
        .collect()
}

/// Bounded history (issue #34) holds for a bound flow's children: each child is a flow with
/// the bound flow's `options`, so an object re-run three times keeps only the Jobs of as many
/// runs as `successfulRunsHistoryLimit` says (here 1; API steps in Jobs so that runs leave
/// objects at all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_objects_child_keeps_only_the_runs_its_history_limit_allows() {
    let (client, ns) = setup("bind-history", all_verbs()).await;
    let mut flow = widget_flow(json!({}));
    flow["options"] = json!({"apiSteps": "Job", "successfulRunsHistoryLimit": 1});
    create_flow(&client, &ns, "widgets", flow).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    let child = child_name("widgets", &ns, "w");
    let mut runs = Vec::new();
    let mut uids = std::collections::BTreeSet::new();
    for version in ["one", "two", "three", "four"] {
        if version != "one" {
            let spec = json!({"spec": {"version": version}});
            widgets(&client, &ns)
                .patch("w", &PatchParams::default(), &Patch::Merge(&spec))
                .await
                .unwrap();
        }
        let done = wait_status(&client, &ns, &child, 90, "the object's run", |s| {
            s["phase"] == "Succeeded"
                && !runs.contains(&s["run"]["id"].as_str().unwrap_or_default().to_string())
        })
        .await;
        runs.push(done["run"]["id"].as_str().unwrap().to_string());
        let uid = flows(&client, &ns).get(&child).await.unwrap().metadata.uid;
        uids.insert(uid.unwrap());
    }
    // One child object throughout: its old runs' Jobs are not gone with a replaced child.
    assert_eq!(uids.len(), 1, "the child was re-made: {uids:?}");
    let last: std::collections::BTreeSet<String> = [runs[3].clone()].into();
    eventually(60, "only the newest run's Jobs left", || async {
        job_runs(&client, &ns, &child).await == last
    })
    .await;
    assert!(config_map_exists(&client, &ns, "w-made-four").await);
}
