//! The API-level step types end to end on testenv, driven through the controller as users run
//! them: `delete`, `applyFile`/`deleteFile` from `spec.artifacts`, `waitFor` with each of its
//! conditions (made true by the test while the flow waits) and its timeout, the label steps and
//! their idempotent re-run, `apply` of a CRD and then an object of the new kind, and `include`
//! from a Secret and from an http URL.
//!
//! `exec` in a named pod (pods/exec) has its own file, `exec_in_pod.rs`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::api::{
    conditions, config_map_versions, create_widget, eventually, install_widget_crd, labels_of,
    published_texts, serve, set_widget_status, unix, wait_next_run, wait_step_running,
    WIDGET_API_VERSION, WIDGET_GROUP,
};
use crate::common::{apply, create_flow, flows, jobs, request_run, setup, step, wait_done};

/// Flow rights on ConfigMaps in its namespace.
fn cm_rule() -> Value {
    json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]})
}

/// Flow rights to read Widgets in its namespace.
fn widget_rule() -> Value {
    json!({"apiGroups": [WIDGET_GROUP], "resources": ["widgets"], "verbs": ["get", "list", "watch"]})
}

async fn cm(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

async fn make_cm(client: &Client, ns: &str, name: &str, labels: Value) {
    apply(client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "labels": labels}})).await;
}

fn message(v: &Value) -> &str {
    v["message"].as_str().unwrap_or_default()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn deployment(name: &str, replicas: i32) -> Value {
    let l = json!({"app": name});
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": l},
        "spec": {"replicas": replicas, "selector": {"matchLabels": l}, "template": {"metadata": {"labels": l},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}})
}

/// Creates `v` in `ns` (server-side apply) with the test's own identity.
async fn create_in(client: &Client, ns: &str, mut v: Value) {
    v["metadata"]["namespace"] = json!(ns);
    apply(client, v).await;
}

// ---------------------------------------------------------------------------------------------
// delete

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_the_named_objects_and_a_rerun_finds_them_gone_unchanged() {
    let (client, ns, ctl) = setup(
        "del",
        json!([cm_rule(), {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "delete"]}]),
        json!([]),
    )
    .await;
    make_cm(&client, &ns, "victim", json!({})).await;
    make_cm(&client, &ns, "bystander", json!({})).await;
    create_in(&client, &ns, deployment("web", 1)).await;
    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), &ns);
    let web_rs = ListParams::default().labels("app=web");
    eventually(60, "the Deployment's ReplicaSet", || async {
        !replica_sets.list(&web_rs).await.unwrap().items.is_empty()
    })
    .await;
    create_flow(&client, &ns, "cleanup", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"type": "delete", "target": {"kind": "ConfigMap", "name": "victim", "namespace": ns}},
            // No namespace: the flow's own.
            {"type": "delete", "target": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
        ]
    }))
    .await;
    let status = wait_done(&client, &ns, "cleanup", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let (s0, s1) = (
        step(&status, "spec.steps[0]"),
        step(&status, "spec.steps[1]"),
    );
    assert_eq!(s0["changed"], true, "{s0:#}");
    assert_eq!(message(s0), format!("deleted ConfigMap/{ns}/victim"));
    assert_eq!(s1["changed"], true, "{s1:#}");
    assert_eq!(message(s1), format!("deleted Deployment/{ns}/web"));
    assert!(cm(&client, &ns, "victim").await.is_none());
    assert!(
        cm(&client, &ns, "bystander").await.is_some(),
        "only the named object"
    );
    assert!(Api::<Deployment>::namespaced(client.clone(), &ns)
        .get_opt("web")
        .await
        .unwrap()
        .is_none());
    // Foreground: the step finished only after the Deployment's dependents were gone.
    assert!(
        replica_sets.list(&web_rs).await.unwrap().items.is_empty(),
        "the ReplicaSet outlived its deleted Deployment"
    );

    request_run(&client, &ns, "cleanup", "again").await;
    let again = wait_next_run(&client, &ns, "cleanup", &status["run"]["id"]).await;
    assert_eq!(again["phase"], "Succeeded", "{again:#}");
    for (path, what) in [
        ("spec.steps[0]", "ConfigMap victim"),
        ("spec.steps[1]", "Deployment web"),
    ] {
        let s = step(&again, path);
        assert_eq!(s["changed"], false, "{s:#}");
        assert_eq!(message(s), format!("{what} was already gone"));
    }
    ctl.abort();
}

/// Creates ConfigMap `owner` and ConfigMap `dependent` owned by it (blocking its owner's
/// foreground deletion), which a finalizer of the test's keeps until the test lets it go.
async fn owner_and_held_dependent(client: &Client, ns: &str, owner: &str, dependent: &str) {
    make_cm(client, ns, owner, json!({})).await;
    let uid = cm(client, ns, owner).await.unwrap().metadata.uid.unwrap();
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": dependent, "namespace": ns, "finalizers": [HELD],
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid,
            "blockOwnerDeletion": true}]}}),
    )
    .await;
}

/// The test's finalizer on a dependent: under foreground deletion its owner could never go.
const HELD: &str = "example.com/held-by-test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_background_ends_once_the_object_is_gone_and_orphan_leaves_what_it_owns() {
    let (client, ns, ctl) = setup("del-prop", json!([cm_rule()]), json!([])).await;
    owner_and_held_dependent(&client, &ns, "owner-bg", "dependent-bg").await;
    owner_and_held_dependent(&client, &ns, "owner-orphan", "dependent-orphan").await;
    create_flow(
        &client,
        &ns,
        "cleanup",
        json!({
            "serviceAccountName": "flow",
            "steps": [
                {"type": "delete", "target": {"kind": "ConfigMap", "name": "owner-bg"},
                    "propagation": "Background"},
                {"type": "delete", "target": {"kind": "ConfigMap", "name": "owner-orphan"},
                    "propagation": "Orphan"},
            ]
        }),
    )
    .await;
    // Foreground (the default) would never end here: the held dependent blocks its owner.
    let status = wait_done(&client, &ns, "cleanup", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    for (path, owner) in [
        ("spec.steps[0]", "owner-bg"),
        ("spec.steps[1]", "owner-orphan"),
    ] {
        assert_eq!(
            message(step(&status, path)),
            format!("deleted ConfigMap/{ns}/{owner}")
        );
        assert!(cm(&client, &ns, owner).await.is_none(), "{owner} is gone");
    }
    // Background: what it owns goes after it, through the garbage collector.
    eventually(
        60,
        "the garbage collector deletes the background owner's dependent",
        || async {
            cm(&client, &ns, "dependent-bg")
                .await
                .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
        },
    )
    .await;
    // Orphan: what it owns stays, no longer owned.
    let orphan = cm(&client, &ns, "dependent-orphan").await.unwrap();
    assert!(orphan.metadata.deletion_timestamp.is_none(), "{orphan:?}");
    assert!(
        orphan
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty(),
        "the orphan's owner reference is removed before its owner goes"
    );
    for name in ["dependent-bg", "dependent-orphan"] {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "finalizers": []}}),
        )
        .await;
    }
    ctl.abort();
}

// ---------------------------------------------------------------------------------------------
// applyFile / deleteFile

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_file_creates_the_artifact_objects_and_delete_file_removes_them() {
    let (client, ns, ctl) = setup(
        "files",
        json!([cm_rule(), {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]}]),
        json!([]),
    )
    .await;
    let app = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\ndata:\n  mode: fast\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: app-sa\n";
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bundle", "namespace": ns}, "data": {"app.yaml": app}})).await;
    create_flow(&client, &ns, "files", json!({
        "serviceAccountName": "flow",
        "artifacts": [{"configMap": "bundle"}],
        "steps": [
            {"type": "applyFile", "path": "app.yaml"},
            // The test looks at the applied objects, then opens this gate.
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "gate"}, "condition": "Exist", "timeoutSeconds": 60},
            {"type": "deleteFile", "path": "app.yaml"},
        ]
    }))
    .await;
    let mid = wait_step_running(&client, &ns, "files", "spec.steps[1]").await;
    let applied = step(&mid, "spec.steps[0]");
    assert_eq!(applied["phase"], "Succeeded", "{mid:#}");
    assert_eq!(applied["changed"], true, "{applied:#}");
    assert_eq!(
        message(applied),
        format!("app.yaml: applied 2 objects (changed): ConfigMap/{ns}/app-config, ServiceAccount/{ns}/app-sa")
    );
    let config = cm(&client, &ns, "app-config")
        .await
        .expect("applyFile created the ConfigMap");
    assert_eq!(config.data.unwrap()["mode"], "fast");
    let sas = Api::<ServiceAccount>::namespaced(client.clone(), &ns);
    assert!(sas.get_opt("app-sa").await.unwrap().is_some());

    make_cm(&client, &ns, "gate", json!({})).await;
    let status = wait_done(&client, &ns, "files", 90).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let deleted = step(&status, "spec.steps[2]");
    assert_eq!(deleted["changed"], true, "{deleted:#}");
    assert_eq!(
        message(deleted),
        format!("app.yaml: deleted 2 of 2 objects ServiceAccount/{ns}/app-sa, ConfigMap/{ns}/app-config")
    );
    assert!(cm(&client, &ns, "app-config").await.is_none());
    assert!(sas.get_opt("app-sa").await.unwrap().is_none());
    assert!(
        cm(&client, &ns, "bundle").await.is_some(),
        "the artifact source itself stays"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_path_escaping_the_root_is_refused() {
    let (client, ns, ctl) = setup("escape", json!([cm_rule()]), json!([])).await;
    // `x.yaml` is the base name `../x.yaml` would fall back to: it must never be applied.
    let x = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: escaped\n";
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bundle", "namespace": ns}, "data": {"x.yaml": x}})).await;
    // Written literally, the path is refused before anything runs.
    create_flow(
        &client,
        &ns,
        "literal",
        json!({"serviceAccountName": "flow", "artifacts": [{"configMap": "bundle"}],
            "steps": [{"type": "applyFile", "path": "../x.yaml"}]}),
    )
    .await;
    // Coming from a variable, it is refused by the executor.
    create_flow(
        &client,
        &ns,
        "substituted",
        json!({"serviceAccountName": "flow", "artifacts": [{"configMap": "bundle"}],
            "vars": {"file": "../x.yaml"},
            "steps": [{"type": "applyFile", "path": "${file}"}]}),
    )
    .await;
    let literal = wait_done(&client, &ns, "literal", 60).await;
    assert_eq!(literal["phase"], "Failed", "{literal:#}");
    assert_eq!(literal["reason"], "InvalidSpec", "{literal:#}");
    assert!(
        message(&literal).contains("spec.steps[0].path")
            && message(&literal).contains("\"../x.yaml\" escapes the artifact root"),
        "{literal:#}"
    );
    let substituted = wait_done(&client, &ns, "substituted", 60).await;
    assert_eq!(substituted["phase"], "Failed", "{substituted:#}");
    assert_eq!(
        message(step(&substituted, "spec.steps[0]")),
        "artifact path \"../x.yaml\" escapes the artifact root",
        "{substituted:#}"
    );
    assert!(cm(&client, &ns, "escaped").await.is_none());
    let ran: Vec<String> = jobs(&client, &ns)
        .await
        .iter()
        .map(|j| j.metadata.labels.as_ref().unwrap()["ops.example.com/flow"].clone())
        .collect();
    assert_eq!(ran, ["substituted"], "the literal typo launched no Job");
    ctl.abort();
}

// ---------------------------------------------------------------------------------------------
// waitFor

/// Runs a one-step flow waiting on `resource` for `condition` (plus `extra` fields); once the
/// step is running, `make_true` makes the condition hold. Returns the final status and the
/// Unix second just before `make_true` ran.
async fn wait_for_case<F, Fut>(
    client: &Client,
    ns: &str,
    resource: Value,
    condition: &str,
    extra: Value,
    make_true: F,
) -> (Value, i64)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut wait = json!({"type": "waitFor", "resource": resource, "condition": condition, "timeoutSeconds": 90});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        wait[k] = v;
    }
    create_flow(
        client,
        ns,
        "waits",
        json!({"serviceAccountName": "flow", "steps": [wait]}),
    )
    .await;
    let running = wait_step_running(client, ns, "waits", "spec.steps[0]").await;
    assert_eq!(running["phase"], "Running", "{running:#}");
    // Read before the change: the step started before this instant and can only finish after
    // it. (Read after, it could be a second or more past the change on a busy machine, and a
    // step that finished at the change would look early.) Whole seconds keep `<=` and `>=`.
    let made_true = k8s_openapi::jiff::Timestamp::now().as_second();
    make_true().await;
    let status = wait_done(client, ns, "waits", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let s = step(&status, "spec.steps[0]");
    assert_eq!(s["changed"], false, "waiting changes nothing: {s:#}");
    assert!(
        unix(&s["startedAt"]) <= made_true && unix(&s["finishedAt"]) >= made_true,
        "the step was waiting before the condition held and finished after: {s:#}"
    );
    (status, made_true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_exist_succeeds_once_the_object_is_created() {
    let (client, ns, ctl) = setup("wf-exist", json!([cm_rule()]), json!([])).await;
    let resource = json!({"kind": "ConfigMap", "name": "late", "namespace": ns});
    let (status, _) = wait_for_case(&client, &ns, resource, "Exist", json!({}), || async {
        make_cm(&client, &ns, "late", json!({})).await;
    })
    .await;
    assert_eq!(
        message(step(&status, "spec.steps[0]")),
        format!("ConfigMap/{ns}/late is Exist")
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_deleted_succeeds_once_the_object_is_gone() {
    let (client, ns, ctl) = setup("wf-deleted", json!([cm_rule()]), json!([])).await;
    make_cm(&client, &ns, "doomed", json!({})).await;
    let resource = json!({"kind": "ConfigMap", "name": "doomed"});
    let (status, _) = wait_for_case(&client, &ns, resource, "Deleted", json!({}), || async {
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .delete("doomed", &DeleteParams::default())
            .await
            .unwrap();
    })
    .await;
    assert_eq!(
        message(step(&status, "spec.steps[0]")),
        format!("ConfigMap/{ns}/doomed is Deleted")
    );
    ctl.abort();
}

/// A `waitFor` on a Widget whose conditions go from `before` to `after` while the flow waits.
struct WidgetWait {
    prefix: &'static str,
    condition: &'static str,
    /// Further fields of the waitFor step (`jsonPath`, `op`, `value` for Custom).
    extra: Value,
    before: &'static [(&'static str, &'static str)],
    after: &'static [(&'static str, &'static str)],
}

/// Runs `case`: the step waits until the Widget's status changes, then succeeds saying so.
async fn widget_wait_succeeds(case: WidgetWait) {
    let (client, ns, ctl) = setup(case.prefix, json!([widget_rule()]), json!([])).await;
    install_widget_crd(&client).await;
    let before = json!({"conditions": conditions(case.before)});
    create_widget(&client, &ns, "w", before).await;
    let resource = json!({"apiVersion": WIDGET_API_VERSION, "kind": "Widget", "name": "w"});
    let after = json!({"conditions": conditions(case.after)});
    let (status, _) = wait_for_case(&client, &ns, resource, case.condition, case.extra, || {
        set_widget_status(&client, &ns, "w", after)
    })
    .await;
    assert_eq!(
        message(step(&status, "spec.steps[0]")),
        format!("Widget/{ns}/w is {}", case.condition)
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_ready_succeeds_once_the_ready_condition_is_true() {
    widget_wait_succeeds(WidgetWait {
        prefix: "wf-ready",
        condition: "Ready",
        extra: json!({}),
        before: &[("Ready", "False")],
        after: &[("Ready", "True")],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_available_succeeds_once_a_deployment_and_a_daemonset_roll_out() {
    let (client, ns, ctl) = setup(
        "wf-avail",
        json!([{"apiGroups": ["apps"], "resources": ["deployments", "daemonsets"], "verbs": ["get", "list", "watch"]}]),
        json!([]),
    )
    .await;
    create_flow(&client, &ns, "rollout", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"type": "waitFor", "resource": {"kind": "Deployment", "name": "web"}, "condition": "Available", "timeoutSeconds": 90},
            {"type": "waitFor", "resource": {"kind": "DaemonSet", "name": "agent"}, "condition": "Available", "timeoutSeconds": 90},
        ]
    }))
    .await;
    wait_step_running(&client, &ns, "rollout", "spec.steps[0]").await;
    // testenv's kubelets start both; the flow is already waiting when they are created.
    create_in(&client, &ns, deployment("web", 2)).await;
    let l = json!({"app": "agent"});
    create_in(
        &client,
        &ns,
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": l}, "template": {"metadata": {"labels": l},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}),
    )
    .await;
    let created = k8s_openapi::jiff::Timestamp::now().as_second();
    let status = wait_done(&client, &ns, "rollout", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let (d, ds) = (
        step(&status, "spec.steps[0]"),
        step(&status, "spec.steps[1]"),
    );
    assert_eq!(message(d), format!("Deployment/{ns}/web is Available"));
    assert_eq!(message(ds), format!("DaemonSet/{ns}/agent is Available"));
    assert!(unix(&d["startedAt"]) <= created, "{d:#}");
    // What the flow saw is what the API server says now.
    let dep = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    assert_eq!(dep.status.unwrap().available_replicas, Some(2));
    let dst = Api::<DaemonSet>::namespaced(client.clone(), &ns)
        .get("agent")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(dst.desired_number_scheduled > 0);
    assert_eq!(dst.number_available, Some(dst.desired_number_scheduled));
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_healthy_succeeds_once_a_custom_resource_stops_reconciling() {
    // Like many simple operators, this one reports conditions but no observedGeneration.
    widget_wait_succeeds(WidgetWait {
        prefix: "wf-healthy",
        condition: "Healthy",
        extra: json!({}),
        before: &[("Reconciling", "True"), ("Ready", "False")],
        after: &[("Reconciling", "False"), ("Ready", "True")],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_custom_succeeds_once_a_filtered_json_path_matches() {
    widget_wait_succeeds(WidgetWait {
        prefix: "wf-custom",
        condition: "Custom",
        extra: json!({"jsonPath": "{.status.conditions[?(@.type==\"Synced\")].status}", "op": "equals", "value": "True"}),
        before: &[("Synced", "False")],
        after: &[("Synced", "True")],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_a_condition_that_never_holds_fails_at_its_timeout_naming_it() {
    let (client, ns, ctl) = setup("wf-timeout", json!([cm_rule()]), json!([])).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "switch", "namespace": ns}, "data": {"mode": "off"}})).await;
    create_flow(&client, &ns, "stuck", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "never"}, "condition": "Exist", "timeoutSeconds": 3, "continueOnError": true},
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "switch"}, "condition": "Custom",
             "jsonPath": "{.data.mode}", "op": "equals", "value": "on", "timeoutSeconds": 3},
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after"}}},
        ]
    }))
    .await;
    let status = wait_done(&client, &ns, "stuck", 90).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let (exist, custom) = (
        step(&status, "spec.steps[0]"),
        step(&status, "spec.steps[1]"),
    );
    for s in [exist, custom] {
        assert_eq!(s["phase"], "Failed", "{s:#}");
        let took = unix(&s["finishedAt"]) - unix(&s["startedAt"]);
        assert!(
            (3..30).contains(&took),
            "failed after {took}s, not at its 3 s timeout: {s:#}"
        );
    }
    assert_eq!(
        message(exist),
        format!("timed out after 3s waiting for ConfigMap/{ns}/never to be Exist; last seen: ConfigMap/{ns}/never: does not exist")
    );
    assert_eq!(
        message(custom),
        format!("timed out after 3s waiting for ConfigMap/{ns}/switch to be Custom; last seen: ConfigMap/{ns}/switch: {{.data.mode}} is \"off\", want Equals \"on\"")
    );
    assert_eq!(
        message(&status),
        format!("spec.steps[1]: {}", message(custom))
    );
    assert!(cm(&client, &ns, "after").await.is_none());
    ctl.abort();
}

// ---------------------------------------------------------------------------------------------
// setLabel / removeLabel / patchLabel

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_steps_by_name_and_selector_and_from_a_map_rerun_unchanged() {
    let (client, ns, ctl) = setup("labels", json!([cm_rule()]), json!([])).await;
    make_cm(&client, &ns, "cm-a", json!({"drop-me": "x", "keep": "y"})).await;
    make_cm(&client, &ns, "cm-b", json!({"group": "x", "old": "1"})).await;
    make_cm(&client, &ns, "cm-c", json!({"group": "x", "old": "1"})).await;
    make_cm(&client, &ns, "cm-d", json!({"group": "y", "old": "1"})).await;
    make_cm(&client, &ns, "cm-e", json!({"old": "1"})).await;
    // The seed's labels-from-map shape: JSON text in a var, parsed by eval, applied per object.
    let mapping =
        json!({"cm-b": {"zone": "a"}, "cm-d": {"zone": "d", "old": null}, "cm-e": {"zone": "e"}})
            .to_string();
    create_flow(&client, &ns, "labels", json!({
        "serviceAccountName": "flow",
        "vars": {"mapping": mapping},
        "steps": [
            {"type": "setLabel", "target": {"kind": "ConfigMap", "name": "cm-a"}, "labels": {"tier": "gold"}},
            {"type": "setLabel", "target": {"kind": "ConfigMap", "selector": "group=x"}, "labels": {"team": "ops"}},
            {"type": "removeLabel", "target": {"kind": "ConfigMap", "name": "cm-a", "namespace": ns}, "keys": ["drop-me", "never-there"]},
            {"type": "removeLabel", "target": {"kind": "ConfigMap", "selector": "group=x"}, "keys": ["old"]},
            {"type": "eval", "expression": "json(${mapping})", "var": "by_name"},
            // cm-e is in the map but not selected; cm-c is selected but not in the map.
            {"type": "patchLabel", "target": {"kind": "ConfigMap", "selector": "group"}, "fromVar": "by_name"},
        ]
    }))
    .await;
    let first = wait_done(&client, &ns, "labels", 120).await;
    assert_eq!(first["phase"], "Succeeded", "{first:#}");
    for i in [0, 1, 2, 3, 5] {
        let s = step(&first, &format!("spec.steps[{i}]"));
        assert_eq!(s["changed"], true, "{s:#}");
    }
    assert_eq!(
        message(step(&first, "spec.steps[1]")),
        "relabelled 2 of 2 ConfigMap cm-b, cm-c"
    );
    assert_eq!(
        message(step(&first, "spec.steps[5]")),
        "relabelled 2 of 2 ConfigMap cm-b, cm-d"
    );
    let want = [
        ("cm-a", labels(&[("keep", "y"), ("tier", "gold")])),
        (
            "cm-b",
            labels(&[("group", "x"), ("team", "ops"), ("zone", "a")]),
        ),
        ("cm-c", labels(&[("group", "x"), ("team", "ops")])),
        ("cm-d", labels(&[("group", "y"), ("zone", "d")])),
        ("cm-e", labels(&[("old", "1")])),
    ];
    for (name, l) in &want {
        assert_eq!(&labels_of(&client, &ns, name).await, l, "{name}");
    }

    // The labelled objects (the controller keeps its own run records in ConfigMaps too).
    let versions = config_map_versions(&client, &ns, "cm-").await;
    assert_eq!(versions.len(), 5);
    request_run(&client, &ns, "labels", "again").await;
    let again = wait_next_run(&client, &ns, "labels", &first["run"]["id"]).await;
    assert_eq!(again["phase"], "Succeeded", "{again:#}");
    for i in [0, 1, 2, 3, 5] {
        let s = step(&again, &format!("spec.steps[{i}]"));
        assert_eq!(s["changed"], false, "{s:#}");
    }
    assert_eq!(
        config_map_versions(&client, &ns, "cm-").await,
        versions,
        "a re-run writes nothing"
    );
    for (name, l) in &want {
        assert_eq!(&labels_of(&client, &ns, name).await, l, "{name}");
    }
    ctl.abort();
}

// ---------------------------------------------------------------------------------------------
// apply of a CRD, then of its kind

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_of_a_crd_lets_a_later_step_apply_an_object_of_the_new_kind() {
    let (client, ns, ctl) = setup(
        "crd",
        json!([cm_rule()]),
        json!([{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch", "create", "patch"]},
               {"apiGroups": ["*"], "resources": ["gadgets"], "verbs": ["get", "list", "watch", "create", "patch"]}]),
    )
    .await;
    // CRDs are cluster-wide: a group of this namespace's own.
    let group = format!("{ns}.apisteps.example.com");
    let crd_name = format!("gadgets.{group}");
    create_flow(&client, &ns, "crd", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"type": "apply", "manifests": {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": crd_name},
                "spec": {"group": group, "scope": "Namespaced", "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                    "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object",
                        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]}}},
            {"type": "apply", "manifests": format!("apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: g1\nspec:\n  size: 3\n")},
        ]
    }))
    .await;
    let status = wait_done(&client, &ns, "crd", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(
        message(step(&status, "spec.steps[1]")),
        format!("applied 1 object (changed): Gadget/{ns}/g1")
    );
    let ar = ApiResource {
        group: group.clone(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let gadget = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
        .get("g1")
        .await
        .expect("the custom object exists");
    assert_eq!(gadget.data["spec"]["size"], 3);
    let nodes: Vec<String> = jobs(&client, &ns)
        .await
        .iter()
        .map(crate::common::job_node)
        .collect();
    // Fused: one executor applied the CRD and then an object of the kind it had just created
    // (its discovery is refreshed for a kind it has not seen), in one Job.
    assert_eq!(
        nodes,
        ["s0"],
        "CRD and object were applied by one segment Job"
    );
    ctl.abort();
    Api::<CustomResourceDefinition>::all(client.clone())
        .delete(&crd_name, &DeleteParams::default())
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// include

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_from_a_secret_runs_its_steps() {
    let (client, ns, ctl) = setup(
        "inc-secret",
        json!([cm_rule(), {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
        json!([]),
    )
    .await;
    let steps = "- type: apply\n  manifests:\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: from-secret}\n    data: {by: \"${who}\"}\n- type: log\n  message: secret steps ran\n";
    apply(&client, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ops-steps", "namespace": ns}, "stringData": {"steps.yaml": steps}})).await;
    create_flow(&client, &ns, "inc", json!({
        "serviceAccountName": "flow",
        "vars": {"who": "the-flow"},
        "steps": [{"type": "include", "source": {"secretRef": {"name": "ops-steps", "key": "steps.yaml"}}, "as": "steps"}]
    }))
    .await;
    let status = wait_done(&client, &ns, "inc", 90).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(
        message(step(&status, "spec.steps[0]")),
        "included 2 steps",
        "{status:#}"
    );
    for i in 0..2 {
        let s = step(&status, &format!("spec.steps[0].included[{i}]"));
        assert_eq!(s["phase"], "Succeeded", "{s:#}");
    }
    let made = cm(&client, &ns, "from-secret")
        .await
        .expect("the included apply ran");
    assert_eq!(made.data.unwrap()["by"], "the-flow");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_secret_include_fails_without_revealing_the_secret() {
    let (client, ns, ctl) = setup(
        "inc-leak",
        json!([cm_rule(), {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
        json!([]),
    )
    .await;
    let token = "tok-7f3a9c1e-do-not-print";
    let broken = format!("- type: log\n  message: {token}\n  extra: [{token}, \n  - {token}: {{\n");
    apply(&client, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ops-steps", "namespace": ns}, "stringData": {"steps.yaml": broken}})).await;
    create_flow(&client, &ns, "leak", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"type": "include", "source": {"secretRef": {"name": "ops-steps", "key": "steps.yaml"}}},
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after"}}},
        ]
    }))
    .await;
    let status = wait_done(&client, &ns, "leak", 90).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let msg = message(&status);
    assert!(
        msg.starts_with("spec.steps[0]: the included Secret key: YAML document 1 is not valid"),
        "{msg}"
    );
    assert!(cm(&client, &ns, "after").await.is_none());
    let flow = flows(&client, &ns).get("leak").await.unwrap();
    let whole = serde_json::to_string(&flow).unwrap();
    assert!(!whole.contains(token), "the flow shows the Secret: {whole}");
    let texts = published_texts(&client, &ns).await;
    assert!(!texts.is_empty(), "the run published Events");
    for t in &texts {
        assert!(!t.contains(token), "published: {t}");
    }
    // The Secret is still what the test wrote (the token is real and readable where it belongs).
    let secret = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("ops-steps")
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&secret.data.unwrap()["steps.yaml"].0).contains(token));
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_from_an_http_url_applies_the_served_manifest() {
    let (client, ns, ctl) = setup("inc-http", json!([cm_rule()]), json!([])).await;
    let served = serve(format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-http\n  namespace: {ns}\ndata:\n  origin: web\n"
    ))
    .await;
    create_flow(&client, &ns, "http", json!({
        "serviceAccountName": "flow",
        "steps": [{"type": "include", "source": format!("{}/manifests/app.yaml", served.url), "as": "manifests"}]
    }))
    .await;
    let status = wait_done(&client, &ns, "http", 90).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let s = step(&status, "spec.steps[0]");
    assert_eq!(s["changed"], true, "{s:#}");
    assert_eq!(
        message(s),
        format!("applied 1 object (changed): ConfigMap/{ns}/from-http")
    );
    let made = cm(&client, &ns, "from-http")
        .await
        .expect("the served manifest was applied");
    assert_eq!(made.data.unwrap()["origin"], "web");
    assert_eq!(
        *served.requests.lock().unwrap(),
        ["GET /manifests/app.yaml HTTP/1.1"]
    );
    ctl.abort();
}
