//! The seed operators users wrote by hand with kopf, as the flows in `examples/kopf/`, run as
//! written (only their namespace changes) with the least-privilege RBAC beside them. Seed 004's
//! MySQL runs on a stand-in image (`tests/fixtures/fake-mysql`), the rest is real: StatefulSet,
//! claims bound to local volumes, pods/exec through the API server, `kubectl exec` as in the seed.

use std::path::PathBuf;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::discovery::ApiResource;
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_testenv::apply::apply_value;
use serde_json::{json, Value};

mod common;

use common::api::eventually;
use common::{apply, delete_flow, flow_events, prepare, start_controller, wait_done};

fn example(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples/kopf")
        .join(path)
}

/// Every document of `path`, moved into `ns`.
fn documents_in(path: &str, ns: &str) -> Vec<Value> {
    documents_renamed(path, ns, &[])
}

/// [`documents_in`], with each `(from, to)` text replaced first (other namespaces the example
/// names, such as the targets of seed 002's copy, made unique to this test).
fn documents_renamed(path: &str, ns: &str, renames: &[(&str, &str)]) -> Vec<Value> {
    let mut text = std::fs::read_to_string(example(path)).unwrap();
    for (from, to) in renames {
        text = text.replace(from, to);
    }
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut v: Value = serde::Deserialize::deserialize(doc).unwrap();
        let here = &v["metadata"]["namespace"];
        if here.is_null() || here == "default" {
            v["metadata"]["namespace"] = json!(ns);
        }
        let subjects = v.get_mut("subjects").and_then(Value::as_array_mut);
        for subject in subjects.into_iter().flatten() {
            subject["namespace"] = json!(ns);
        }
        docs.push(v);
    }
    docs
}

/// The Secret `<instance>-credentials` the database owner creates before (or after) the flow.
async fn credentials(client: &kube::Client, ns: &str, instance: &str, password: &str) {
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{instance}-credentials"), "namespace": ns},
        "stringData": {"password": password}});
    apply(client, secret).await;
}

#[test]
fn every_kopf_example_compiles() {
    for file in [
        "database.yaml",
        "mysql.yaml",
        "secret-sync.yaml",
        "werf-bundle.yaml",
    ] {
        let flow = &documents_in(file, "default")[0];
        let id = FlowId {
            name: flow["metadata"]["name"].as_str().unwrap(),
            namespace: Some("default"),
        };
        if let Err(diags) = compile(&id, &flow["spec"]) {
            panic!("{file}: {diags:?}");
        }
    }
}

/// Installs the seed's Database CRD as written (`examples/kopf/database-crd.yaml`) and waits
/// until its kind is served.
async fn install_database_crd(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let text = std::fs::read_to_string(example("database-crd.yaml")).unwrap();
    common::seed::apply_text(client, &text).await;
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Database".into(),
        plural: "databases".into(),
    };
    let databases: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    eventually(30, "databases are served", || async {
        databases.list(&Default::default()).await.is_ok()
    })
    .await;
    databases
}

async fn database(client: &kube::Client, ns: &str, name: &str, version: &str) {
    apply(
        client,
        json!({"apiVersion": "example.com/v1", "kind": "Database",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"version": version, "size": "1Gi"}}),
    )
    .await;
}

async fn phase_of(databases: &Api<DynamicObject>, name: &str) -> String {
    let db = databases.get(name).await.unwrap();
    db.data["status"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The image and the first env var's name of `<name>-pod`, once it exists.
async fn database_pod(pods: &Api<Pod>, name: &str) -> (String, String, Pod) {
    let pod = pods.get(&format!("{name}-pod")).await.unwrap();
    let container = &pod.spec.as_ref().unwrap().containers[0];
    let env = &container.env.as_ref().unwrap()[0];
    let image = container.image.clone().unwrap_or_default();
    (image, env.name.clone(), pod)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_operator_of_seed_001_serves_every_database_object() {
    let (client, ns) = prepare("kopf-db", json!([]), json!([])).await;
    let databases = install_database_crd(&client, &ns).await;
    for doc in documents_in("rbac/database.yaml", &ns) {
        apply_value(&client, doc, None).await.unwrap();
    }
    let ctl = start_controller(&client, &ns);
    apply(&client, documents_in("database.yaml", &ns).remove(0)).await;
    database(&client, &ns, "postgres-test", "15.3").await;
    database(&client, &ns, "mysql-dev", "8.0").await;

    // Each waits for its credentials, Creating meanwhile; the database owner creates them.
    for name in ["postgres-test", "mysql-dev"] {
        let what = format!("{name} Creating");
        eventually(60, &what, || async {
            phase_of(&databases, name).await == "Creating"
        })
        .await;
        credentials(&client, &ns, name, "s3cret-value").await;
    }
    for name in ["postgres-test", "mysql-dev"] {
        let what = format!("{name} Running");
        eventually(120, &what, || async {
            phase_of(&databases, name).await == "Running"
        })
        .await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let (image, env, pod) = database_pod(&pods, "postgres-test").await;
    assert_eq!(
        (image.as_str(), env.as_str()),
        ("postgres:15.3", "POSTGRES_PASSWORD")
    );
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["app"], "database");
    assert_eq!(labels["database-name"], "postgres-test");
    let container = &pod.spec.as_ref().unwrap().containers[0];
    let secret_ref = container.env.as_ref().unwrap()[0]
        .value_from
        .as_ref()
        .and_then(|v| v.secret_key_ref.as_ref())
        .unwrap();
    assert_eq!(secret_ref.name, "postgres-test-credentials");
    let (image, env, _) = database_pod(&pods, "mysql-dev").await;
    assert_eq!(
        (image.as_str(), env.as_str()),
        ("mysql:8.0", "MYSQL_ROOT_PASSWORD")
    );
    let flow = common::wait_status(&client, &ns, "database", 60, "both Running", |st| {
        st["bound"]["running"] == 2
    })
    .await;
    assert!(
        !flow.to_string().contains("s3cret-value"),
        "the password is nowhere in status"
    );

    // Deleting a Database deletes its pod first, as kopf's @on.delete handler did; the other stays.
    databases
        .delete("postgres-test", &DeleteParams::default())
        .await
        .unwrap();
    eventually(90, "the Database is gone", || async {
        databases.get_opt("postgres-test").await.unwrap().is_none()
    })
    .await;
    eventually(30, "its pod is gone", || async {
        pods.get_opt("postgres-test-pod").await.unwrap().is_none()
    })
    .await;
    assert!(pods.get_opt("mysql-dev-pod").await.unwrap().is_some());
    ctl.abort();
}

/// Runs `sql` with the mysql client inside the database pod, as the seed does with kubectl exec.
async fn mysql_in_pod(ns: &str, sql: &str) -> (bool, String) {
    let args = [
        "exec",
        "-n",
        ns,
        "mysql-instance-0",
        "-c",
        "mysql",
        "--",
        "mysql",
    ]
    .into_iter()
    .chain(["-potuspassword", "-e", sql, "otus-database"])
    .map(String::from)
    .collect::<Vec<_>>();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::kubectl(&args)
    })
    .await
    .unwrap()
}

async fn volume_of(claims: &Api<PersistentVolumeClaim>, name: &str) -> String {
    let claim = claims.get(name).await.unwrap();
    claim.spec.and_then(|s| s.volume_name).unwrap_or_default()
}

/// Applies `flow`, waits until it Succeeded and returns the messages of its Events so far.
async fn apply_until_succeeded(client: &kube::Client, ns: &str, flow: Value) -> Vec<String> {
    let name = flow["metadata"]["name"].as_str().unwrap().to_string();
    apply(client, flow).await;
    let status = wait_done(client, ns, &name, 180).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    event_messages(client, ns, &name).await
}

async fn event_messages(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    flow_events(client, ns, name)
        .await
        .into_iter()
        .filter_map(|e| e.message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_operator_of_seed_004_backs_up_on_delete_and_restores_on_create() {
    let (client, ns) = prepare("kopf-mysql", json!([]), json!([])).await;
    for doc in documents_in("rbac/mysql.yaml", &ns) {
        apply_value(&client, doc, None).await.unwrap();
    }
    // testenv has no provisioner: local volumes on one node, reserved for the claims the flow
    // makes (the data claim twice: before and after the flow is re-created).
    let node = common::env().nodes()[1].clone();
    let volumes = [
        ("backup", "mysql-instance-backup"),
        ("data-1", "data-mysql-instance-0"),
        ("data-2", "data-mysql-instance-0"),
    ];
    for (volume, claim) in volumes {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": format!("{ns}-{volume}")},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                "hostPath": {"path": format!("/srv/{ns}/{volume}")},
                "claimRef": {"namespace": ns, "name": claim},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}}),
        )
        .await;
    }
    credentials(&client, &ns, "mysql-instance", "otuspassword").await;
    let ctl = start_controller(&client, &ns);
    let flow = documents_in("mysql.yaml", &ns).remove(0);

    let events = apply_until_succeeded(&client, &ns, flow.clone()).await;
    assert!(
        events
            .iter()
            .any(|m| m == "mysql-instance: no backup to restore"),
        "{events:#?}"
    );

    // The seed's session: rows written with kubectl exec.
    for row in ["some data", "some data-2"] {
        let sql = format!("INSERT INTO test ( id, name ) VALUES ( null, '{row}' );");
        let (ok, out) = mysql_in_pod(&ns, &sql).await;
        assert!(ok, "kubectl exec: {out}");
    }

    // Deleting the instance takes a backup, then removes the server and its data volume.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let first_volume = volume_of(&claims, "data-mysql-instance-0").await;
    delete_flow(
        &client,
        &ns,
        "mysql-instance",
        &DeleteParams::default(),
        120,
    )
    .await;
    let dump = std::fs::read_to_string(
        common::env()
            .node_root(&node)
            .join(format!("srv/{ns}/backup/dump.sql")),
    )
    .expect("the backup volume holds a dump");
    assert!(
        dump.contains("'some data'") && dump.contains("'some data-2'"),
        "{dump}"
    );
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    assert!(sets.get_opt("mysql-instance").await.unwrap().is_none());
    eventually(30, "the data claim is gone", || async {
        claims
            .get_opt("data-mysql-instance-0")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    assert!(claims
        .get_opt("mysql-instance-backup")
        .await
        .unwrap()
        .is_some());

    // Creating it again restores the rows onto a fresh data volume.
    let events = apply_until_succeeded(&client, &ns, flow).await;
    assert!(
        events
            .iter()
            .any(|m| m.starts_with("mysql-instance: restored from backup taken")),
        "{events:#?}"
    );
    let (ok, out) = mysql_in_pod(&ns, "select * from test;").await;
    assert!(ok, "kubectl exec: {out}");
    assert_eq!(out, "null, 'some data'\nnull, 'some data-2'\n");
    let second_volume = volume_of(&claims, "data-mysql-instance-0").await;
    assert_ne!(
        second_volume, first_volume,
        "the rows came back from the backup, not from the old data volume"
    );
    ctl.abort();
}

/// A seed's scheduled flow with its schedule shortened to every `seconds` seconds (a sixth,
/// seconds field), so the test sees several slots without waiting minutes.
fn every_seconds(mut flow: Value, seconds: u32) -> Value {
    assert!(
        flow["spec"]["schedule"].is_string(),
        "the example is scheduled"
    );
    flow["spec"]["schedule"] = json!(format!("*/{seconds} * * * * *"));
    flow
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_sync_controller_of_seed_002_copies_and_resyncs_without_exposing_the_secret() {
    use k8s_openapi::api::core::v1::Secret;
    let (client, ns) = prepare("kopf-sync", json!([]), json!([])).await;
    let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
    for target in [&a, &b] {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target}}),
        )
        .await;
    }
    let renames = [("team-a", a.as_str()), ("team-b", b.as_str())];
    for doc in documents_renamed("rbac/secret-sync.yaml", &ns, &renames) {
        apply_value(&client, doc, None).await.unwrap();
    }
    apply(&client, json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "registry-credentials", "namespace": ns},
        "stringData": {".dockerconfigjson": "{\"auths\":{\"r.example\":{\"auth\":\"c3luYy1jYW5hcnk=\"}}}"}})).await;
    let ctl = start_controller(&client, &ns);
    let flow = documents_renamed("secret-sync.yaml", &ns, &renames).remove(0);
    apply(&client, every_seconds(flow, 3)).await;
    let status = common::wait_status(&client, &ns, "secret-sync", 60, "a run", |s| {
        s["phase"] == "Succeeded" || s["phase"] == "Failed"
    })
    .await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert!(
        !status.to_string().contains("c3luYy1jYW5hcnk"),
        "{status:#}"
    );
    for target in [&a, &b] {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), target);
        let copy = secrets.get("registry-credentials").await.unwrap();
        assert_eq!(
            copy.type_.as_deref(),
            Some("kubernetes.io/dockerconfigjson")
        );
        let data = copy.data.unwrap_or_default();
        assert!(String::from_utf8_lossy(&data[".dockerconfigjson"].0).contains("c3luYy1jYW5hcnk="));
    }
    // A copy deleted by hand comes back on a later slot, as the reconciler re-created it.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &a);
    secrets
        .delete("registry-credentials", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "the deleted copy is back", || async {
        secrets
            .get_opt("registry-credentials")
            .await
            .unwrap()
            .is_some()
    })
    .await;
    for message in event_messages(&client, &ns, "secret-sync").await {
        assert!(!message.contains("c3luYy1jYW5hcnk"), "{message}");
    }
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_werf_bundle_operator_of_seed_003_applies_the_bundle_with_its_values_on_a_schedule() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    let (client, ns) = prepare("kopf-werf", json!([]), json!([])).await;
    for doc in documents_in("rbac/werf-bundle.yaml", &ns) {
        apply_value(&client, doc, None).await.unwrap();
    }
    apply(&client, documents_in("bundles/myapp.yaml", &ns).remove(0)).await;
    let ctl = start_controller(&client, &ns);
    let flow = every_seconds(documents_in("werf-bundle.yaml", &ns).remove(0), 5);
    apply(&client, flow.clone()).await;
    let status = common::wait_status(&client, &ns, "werf-bundle", 120, "a deploy", |s| {
        s["phase"] == "Succeeded" || s["phase"] == "Failed"
    })
    .await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let image = |d: &Deployment| {
        d.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .image
            .clone()
    };
    let d = deployments.get("myapp").await.unwrap();
    assert_eq!(image(&d).as_deref(), Some("nginx:1.27"));
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(2));
    Api::<Service>::namespaced(client.clone(), &ns)
        .get("myapp")
        .await
        .unwrap();
    // New values: the next slot deploys them (a spec change alone starts no run).
    let mut updated = flow;
    updated["spec"]["vars"]["image"] = json!("nginx:1.28");
    apply(&client, updated).await;
    eventually(60, "the next slot deploys nginx:1.28", || async {
        image(&deployments.get("myapp").await.unwrap()).as_deref() == Some("nginx:1.28")
    })
    .await;
    let status = common::wait_status(&client, &ns, "werf-bundle", 60, "the deploy ends", |s| {
        s["phase"] == "Succeeded" && s["observedGeneration"] == json!(2)
    })
    .await;
    assert!(status["lastScheduleTime"].is_string(), "{status:#}");
    ctl.abort();
}
