//! The seed operators users wrote by hand with kopf, as the flows in `examples/kopf/`, run as
//! written (only their namespace changes) with the least-privilege RBAC beside them. Seed 004's
//! MySQL runs on a stand-in image (`tests/fixtures/fake-mysql`), the rest is real: StatefulSet,
//! claims bound to local volumes, pods/exec through the API server, `kubectl exec` as in the seed.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_controller::bind::child::child_name;
use pseudoflow_testenv::apply::apply_value;
use serde_json::{json, Value};

use crate::common::api::eventually;
use crate::common::kopf_examples::{documents_renamed, example};
use crate::common::{apply, flow_events, prepare, start_controller, wait_until, Shown};

/// Every document of `path`, moved into `ns`.
fn documents_in(path: &str, ns: &str) -> Vec<Value> {
    documents_renamed(path, ns, &[])
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
        let flow = &mut documents_in(file, "default")[0];
        pseudoflow_crd::quoting::default_by_version(flow);
        let id = FlowId {
            name: flow["metadata"]["name"].as_str().unwrap(),
            namespace: Some("default"),
        };
        if let Err(diags) = compile(&id, &flow["spec"]) {
            panic!("{file}: {diags:?}");
        }
    }
}

/// Installs the seed's Database CRD (`examples/kopf/database-crd.yaml`: as written, plus
/// `status.podName`) and waits until its kind is served.
async fn install_database_crd(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let text = std::fs::read_to_string(example("database-crd.yaml")).unwrap();
    crate::common::seed::apply_text(client, &text).await;
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

/// What a wait on Database `name` shows when it times out: the Database, its child flow, its
/// pod and its credentials (each with its Events).
fn database_shown(
    client: &kube::Client,
    databases: &Api<DynamicObject>,
    ns: &str,
    name: &str,
) -> Vec<Shown> {
    let pods = ApiResource::erase::<Pod>(&());
    let pods = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &pods);
    vec![
        Shown::object(databases.clone(), ns, name),
        Shown::flow(client, ns, &child_name("database", ns, name)),
        Shown::flow(client, ns, "database"),
        Shown::object(pods, ns, &format!("{name}-pod")),
    ]
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
        let shown = database_shown(&client, &databases, &ns, name);
        wait_until(&client, &what, 120, &shown, || async {
            phase_of(&databases, name).await == "Running"
        })
        .await;
    }
    // What the kopf handler returned ({'pod-name': ...}) is in status, once Running.
    for name in ["postgres-test", "mysql-dev"] {
        let db = databases.get(name).await.unwrap();
        assert_eq!(
            db.data["status"]["podName"],
            format!("{name}-pod"),
            "{:#}",
            db.data["status"]
        );
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
    let (image, env, mysql) = database_pod(&pods, "mysql-dev").await;
    assert_eq!(
        (image.as_str(), env.as_str()),
        ("mysql:8.0", "MYSQL_ROOT_PASSWORD")
    );
    // Running is the database serving, not a moment of it: both pods still run.
    let (_, _, postgres) = database_pod(&pods, "postgres-test").await;
    for pod in [&postgres, &mysql] {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        assert_eq!(phase, Some("Running"), "{:#?}", pod.status);
    }
    let flow = crate::common::wait_status(&client, &ns, "database", 60, "both Running", |st| {
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
async fn mysql_in_pod(ns: &str, password: &str, sql: &str) -> (bool, String) {
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
    .map(String::from)
    .chain([format!("-p{password}"), "-e".into(), sql.into()])
    .chain(["otus-database".to_string()])
    .collect::<Vec<_>>();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::common::kubectl(&args)
    })
    .await
    .unwrap()
}

/// The volume bound to claim `name`.
async fn volume_of(claims: &Api<PersistentVolumeClaim>, name: &str) -> String {
    let claim = claims.get(name).await.unwrap();
    claim.spec.and_then(|s| s.volume_name).unwrap_or_default()
}

/// The messages of the Events about flow `name` so far.
async fn event_messages(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    flow_events(client, ns, name)
        .await
        .into_iter()
        .filter_map(|e| e.message)
        .collect()
}

/// The messages of the Events about the `kind` object `name` so far (what `kubectl describe`
/// shows), oldest first.
async fn object_event_messages(
    client: &kube::Client,
    ns: &str,
    kind: &str,
    name: &str,
) -> Vec<String> {
    let fields = format!("involvedObject.kind={kind},involvedObject.name={name}");
    let mut items = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&fields))
        .await
        .unwrap()
        .items;
    items.sort_by_key(crate::common::event_time);
    items.into_iter().filter_map(|e| e.message).collect()
}

/// Installs a seed's CRD as written (`examples/kopf/<file>`) and waits until its kind is served;
/// returns its objects in `ns`.
async fn install_seed_crd(
    client: &kube::Client,
    ns: &str,
    file: &str,
    (group, version, kind, plural): (&str, &str, &str, &str),
) -> Api<DynamicObject> {
    let text = std::fs::read_to_string(example(file)).unwrap();
    crate::common::seed::apply_text(client, &text).await;
    let ar = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    };
    let objects: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    eventually(30, &format!("{plural} are served"), || async {
        objects.list(&Default::default()).await.is_ok()
    })
    .await;
    objects
}

/// The seed's `deploy/cr.yml`: a MySQL in the seed's own format, password in its spec.
fn mysql_instance(ns: &str, password: &str) -> Value {
    json!({"apiVersion": "otus.homework/v1", "kind": "MySQL",
        "metadata": {"name": "mysql-instance", "namespace": ns},
        "spec": {"image": "mysql:8.0", "database": "otus-database", "password": password,
            "storage_size": "1Gi"}})
}

/// Waits until the MySQL's run for generation `generation` ended Running; returns its status.
async fn wait_mysql_running(mysqls: &Api<DynamicObject>, generation: i64) -> Value {
    let mut last = Value::Null;
    for _ in 0..240 {
        if let Some(m) = mysqls.get_opt("mysql-instance").await.unwrap() {
            last = m.data["status"].clone();
            let ready = last["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready");
            if ready.is_some_and(|c| c["status"] == "True" && c["observedGeneration"] == generation)
            {
                return last;
            }
            assert_ne!(last["phase"], "Failed", "{last:#}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!("the MySQL's run of generation {generation} did not end Running: {last:#}")
}

/// Where a password could be seen by a reader of the namespace who may not read Secrets: the
/// MySQL's status, every PseudoFlow's status, Events, and the status and logs of every pod.
async fn password_seen(client: &kube::Client, ns: &str, passwords: &[&str]) -> Vec<String> {
    use k8s_openapi::api::core::v1::Event;
    use kube::api::{ListParams, LogParams};
    let leaked = |text: &str| passwords.iter().any(|p| text.contains(p));
    let mut out = Vec::new();
    let lp = ListParams::default();
    for m in install_seed_crd(client, ns, "mysql-crd.yaml", MYSQL_KIND)
        .await
        .list(&lp)
        .await
        .unwrap()
    {
        if leaked(&m.data["status"].to_string()) {
            out.push("the MySQL's status".to_string());
        }
    }
    for f in crate::common::flows(client, ns).list(&lp).await.unwrap() {
        if leaked(&f.data["status"].to_string()) {
            let name = f.metadata.name.unwrap_or_default();
            out.push(format!("status of flow {name}"));
        }
    }
    for e in Api::<Event>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
    {
        if leaked(&serde_json::to_string(&e).unwrap()) {
            out.push(format!("Event {}", e.reason.unwrap_or_default()));
        }
    }
    for m in install_seed_crd(client, ns, "mysql-crd.yaml", MYSQL_KIND)
        .await
        .list(&lp)
        .await
        .unwrap()
    {
        // Its served mark and sealed progress record among them.
        if leaked(&serde_json::to_string(&m.metadata.annotations).unwrap()) {
            out.push("the MySQL's annotations".to_string());
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let listed = pods.list(&lp).await.unwrap().items;
    assert!(!listed.is_empty(), "the server's pod is there");
    for pod in listed {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if leaked(&serde_json::to_string(&pod.status).unwrap()) {
            out.push(format!("status of pod {name}"));
        }
        let log = pods.logs(&name, &LogParams::default()).await;
        if leaked(&log.unwrap_or_default()) {
            out.push(format!("log of pod {name}"));
        }
    }
    out
}

const MYSQL_KIND: (&str, &str, &str, &str) = ("otus.homework", "v1", "MySQL", "mysqls");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_operator_of_seed_004_serves_mysql_objects_with_backup_restore_and_password_change(
) {
    let (client, ns) = prepare("kopf-mysql", json!([]), json!([])).await;
    let mysqls = install_seed_crd(&client, &ns, "mysql-crd.yaml", MYSQL_KIND).await;
    // The ClusterRole for the volumes is named after the namespace, as the binding's subject is.
    let cluster_role = format!("{ns}-mysql-operator-volumes");
    for doc in documents_renamed(
        "rbac/mysql.yaml",
        &ns,
        &[("mysql-operator-volumes", &cluster_role)],
    ) {
        apply_value(&client, doc, None).await.unwrap();
    }
    // The seed's cluster has one node; testenv has two workers: both volumes go to one of them.
    let node = crate::common::env().nodes()[1].clone();
    let pinned = format!("operator: In, values: [{node}]");
    let flow = documents_renamed("mysql.yaml", &ns, &[("operator: Exists", &pinned)]).remove(0);
    // The chart's controller holds its approval key: the progress of each MySQL's run, whose
    // commands in the server's pod are not safe to repeat, is sealed on the MySQL.
    let key = pseudoflow_controller::approval::Key::random();
    let ctl = crate::common::start_controller_with_key(&client, &ns, key);
    apply(&client, flow).await;

    // Created: the flow makes the volumes, claims, server and Service; there is nothing to restore.
    apply(&client, mysql_instance(&ns, "otuspassword")).await;
    let status = wait_mysql_running(&mysqls, 1).await;
    assert_eq!(status["message"], "No backup to restore", "{status:#}");
    // As shipped, its commands in the server's pod (pods/exec) run in the controller, once each,
    // under the MySQL's sealed progress record: served in the object (the fast path), no child
    // flow and no executor pod.
    let flows = crate::common::flows(&client, &ns);
    let child = child_name("mysql", &ns, "mysql-instance");
    assert!(
        flows.get_opt(&child).await.unwrap().is_none(),
        "no child flow"
    );
    let bound = flows.get("mysql").await.unwrap().data["status"]["bound"].clone();
    assert_eq!(bound["record"], "Object", "{bound:#}");
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    let jobs = jobs.list(&Default::default()).await.unwrap().items;
    assert!(jobs.is_empty(), "no Job ran a step: {} Jobs", jobs.len());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for v in ["backup", "data"] {
        let pv = volumes
            .get(&format!("{ns}-mysql-instance-{v}"))
            .await
            .unwrap();
        let host_path = pv.spec.unwrap().host_path.unwrap().path;
        assert!(
            host_path.starts_with(&format!("/srv/mysql-operator/{ns}/mysql-instance/{v}")),
            "{host_path}"
        );
    }
    let events = object_event_messages(&client, &ns, "MySQL", "mysql-instance").await;
    assert!(
        events
            .iter()
            .any(|m| m == "mysql-instance: no backup to restore"),
        "{events:#?}"
    );

    // The seed's session: rows written with kubectl exec.
    for row in ["some data", "some data-2"] {
        let sql = format!("INSERT INTO test ( id, name ) VALUES ( null, '{row}' );");
        let (ok, out) = mysql_in_pod(&ns, "otuspassword", &sql).await;
        assert!(ok, "kubectl exec: {out}");
    }

    // Deleting the MySQL takes a backup, then removes the server, its data claim and volume.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let first_volume = volume_of(&claims, "mysql-instance-data").await;
    let first_uid = mysqls.get("mysql-instance").await.unwrap().metadata.uid;
    mysqls
        .delete("mysql-instance", &DeleteParams::default())
        .await
        .unwrap();
    eventually(120, "the MySQL is gone", || async {
        mysqls.get_opt("mysql-instance").await.unwrap().is_none()
    })
    .await;
    let dump = std::fs::read_to_string(crate::common::env().node_root(&node).join(format!(
        "srv/mysql-operator/{ns}/mysql-instance/backup/dump.sql"
    )))
    .expect("the backup volume holds a dump");
    assert!(
        dump.contains("'some data'") && dump.contains("'some data-2'"),
        "{dump}"
    );
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    assert!(sets.get_opt("mysql-instance").await.unwrap().is_none());
    assert!(claims
        .get_opt("mysql-instance-data")
        .await
        .unwrap()
        .is_none());
    assert!(volumes.get_opt(&first_volume).await.unwrap().is_none());
    assert!(claims
        .get_opt("mysql-instance-backup")
        .await
        .unwrap()
        .is_some());

    // Created again: the rows come back from the backup onto a fresh data directory.
    apply(&client, mysql_instance(&ns, "otuspassword")).await;
    let second_uid = eventually_get(&mysqls).await.unwrap_or_default();
    assert_ne!(Some(&second_uid), first_uid.as_ref());
    let status = wait_mysql_running(&mysqls, 1).await;
    assert_eq!(status["phase"], "Running", "{status:#}");
    // The seed's "(*) Status subresource": the restore's outcome in status.message.
    assert_eq!(status["message"], "Restoring DB have succeed", "{status:#}");
    let events = object_event_messages(&client, &ns, "MySQL", "mysql-instance").await;
    assert!(
        events
            .iter()
            .any(|m| m.starts_with("mysql-instance: restored from backup taken")),
        "{events:#?}"
    );
    let (ok, out) = mysql_in_pod(&ns, "otuspassword", "select * from test;").await;
    assert!(ok, "kubectl exec: {out}");
    assert_eq!(out, "null, 'some data'\nnull, 'some data-2'\n");
    let pv = volumes
        .get(&format!("{ns}-mysql-instance-data"))
        .await
        .unwrap();
    let host_path = pv.spec.unwrap().host_path.unwrap().path;
    assert!(
        host_path.ends_with(&second_uid),
        "a new data directory: {host_path}"
    );

    // The seed's check goes on: a row written after the restore...
    let sql = "insert into test (name) values ('new 333')";
    let (ok, out) = mysql_in_pod(&ns, "otuspassword", sql).await;
    assert!(ok, "kubectl exec: {out}");
    // ...survives a later run: a password change (the seed's @kopf.on.field('password')) runs
    // ALTER USER in the server and restarts it, and restores nothing over the live data.
    apply(&client, mysql_instance(&ns, "n3w-s3cret")).await;
    let status = wait_mysql_running(&mysqls, 2).await;
    assert_eq!(
        status["message"], "Restoring DB have succeed",
        "a run that restores nothing keeps the message: {status:#}"
    );
    let (ok, out) = mysql_in_pod(&ns, "n3w-s3cret", "select * from test;").await;
    assert!(ok, "kubectl exec with the new password: {out}");
    assert_eq!(
        out, "null, 'some data'\nnull, 'some data-2'\n'new 333'\n",
        "nothing was restored over the live data"
    );
    let (ok, out) = mysql_in_pod(&ns, "otuspassword", "select * from test;").await;
    assert!(!ok, "the old password no longer works: {out}");
    let events = object_event_messages(&client, &ns, "MySQL", "mysql-instance").await;
    let restores = events
        .iter()
        .filter(|m| m.contains("restored from"))
        .count();
    assert_eq!(restores, 1, "one restore, on create: {events:#?}");

    // The password is in the MySQL's spec (the seed's format) and in the Secret the server reads;
    // nowhere else a reader of the namespace can look.
    let seen = password_seen(&client, &ns, &["otuspassword", "n3w-s3cret"]).await;
    assert!(seen.is_empty(), "the password is visible in {seen:?}");
    ctl.abort();
}

/// The uid of the MySQL, once it exists.
async fn eventually_get(mysqls: &Api<DynamicObject>) -> Option<String> {
    for _ in 0..60 {
        if let Some(m) = mysqls.get_opt("mysql-instance").await.unwrap() {
            return m.metadata.uid;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!("the MySQL was not created")
}

const SECSYNCH_KIND: (&str, &str, &str, &str) =
    ("k8sasdb.org", "v1alpha1", "SecSynch", "secsynches");

/// A SecSynch in the seed's shape: the Secret to copy and the namespaces to copy it into.
fn secsynch(ns: &str, name: &str, targets: &[&str]) -> Value {
    json!({"apiVersion": "k8sasdb.org/v1alpha1", "kind": "SecSynch",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"secretName": "registry-credentials", "destinationNamespaces": targets}})
}

/// The source Secret, its `.dockerconfigjson` holding `auth`.
fn registry_credentials(ns: &str, auth: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "registry-credentials", "namespace": ns},
        "stringData": {".dockerconfigjson": format!("{{\"auths\":{{\"r.example\":{{\"auth\":\"{auth}\"}}}}}}")}})
}

/// The Ready condition of a SecSynch (`Null` until written).
async fn ready_of(synchs: &Api<DynamicObject>, name: &str) -> Value {
    let s = synchs.get(name).await.unwrap();
    let conditions = s.data["status"]["conditions"].as_array().cloned();
    conditions
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_sync_controller_of_seed_002_follows_its_source_and_deletes_its_copies() {
    use k8s_openapi::api::core::v1::{Event, Secret};
    let (client, ns) = prepare("kopf-sync", json!([]), json!([])).await;
    let synchs = install_seed_crd(&client, &ns, "secret-sync-crd.yaml", SECSYNCH_KIND).await;
    let (a, b, c) = (format!("{ns}-a"), format!("{ns}-b"), format!("{ns}-c"));
    for target in [&a, &b, &c] {
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
    apply(&client, registry_credentials(&ns, "c3luYy1jYW5hcnk=")).await;
    let ctl = start_controller(&client, &ns);
    apply(
        &client,
        documents_renamed("secret-sync.yaml", &ns, &renames).remove(0),
    )
    .await;
    apply(&client, secsynch(&ns, "secretsync-a", &[&a, &b])).await;

    // Copies in both namespaces, with the source's type and data; the SecSynch is Ready.
    let copy_holds = |target: String, auth: &'static str| {
        let client = client.clone();
        async move {
            let secrets: Api<Secret> = Api::namespaced(client, &target);
            secrets
                .get_opt("registry-credentials")
                .await
                .unwrap()
                .is_some_and(|s| {
                    s.type_.as_deref() == Some("kubernetes.io/dockerconfigjson")
                        && s.data
                            .unwrap_or_default()
                            .get(".dockerconfigjson")
                            .is_some_and(|d| String::from_utf8_lossy(&d.0).contains(auth))
                })
        }
    };
    for target in [&a, &b] {
        eventually(90, &format!("the copy in {target}"), || {
            copy_holds(target.clone(), "c3luYy1jYW5hcnk=")
        })
        .await;
    }
    eventually(60, "secretsync-a Ready", || async {
        ready_of(&synchs, "secretsync-a").await["status"] == "True"
    })
    .await;
    let copied_to = |name: &'static str| {
        let synchs = synchs.clone();
        async move { synchs.get(name).await.unwrap().data["status"]["copiedTo"].clone() }
    };
    assert_eq!(copied_to("secretsync-a").await, json!([&a, &b]));

    // The seed's part 3.2: an edit of the source reaches every copy within seconds (a watch,
    // no schedule), as a run of the SecSynch's flow naming the Secret.
    apply(&client, registry_credentials(&ns, "bmV3LWNhbmFyeQ==")).await;
    let edited = std::time::Instant::now();
    for target in [&a, &b] {
        eventually(30, &format!("the edit reaches {target}"), || {
            copy_holds(target.clone(), "bmV3LWNhbmFyeQ==")
        })
        .await;
    }
    assert!(edited.elapsed() < std::time::Duration::from_secs(30));
    // As shipped it needs no pod, so it is served in the object (the fast path): no child flow,
    // the related Secret's version in the SecSynch's sealed served mark (which the in-object
    // related e2e, bound/in_object_related.rs, shows naming `Secret/<name>` in the trigger).
    let child = child_name("secret-sync", &ns, "secretsync-a");
    let flows = crate::common::flows(&client, &ns);
    assert!(
        flows.get_opt(&child).await.unwrap().is_none(),
        "no child flow"
    );
    let bound = flows.get("secret-sync").await.unwrap().data["status"]["bound"].clone();
    assert_eq!(bound["record"], "Object", "{bound:#}");

    // A namespace removed from destinationNamespaces loses its copy (the seed's controller
    // left it, even once the SecSynch was deleted); the one still listed keeps its copy.
    apply(&client, secsynch(&ns, "secretsync-a", &[&a])).await;
    eventually(90, &format!("the copy in {b} is deleted"), || async {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &b);
        let copy = secrets.get_opt("registry-credentials").await.unwrap();
        copy.is_none()
    })
    .await;
    eventually(
        60,
        "status.copiedTo names the one namespace left",
        || async { copied_to("secretsync-a").await == json!([&a]) },
    )
    .await;
    assert!(
        copy_holds(a.clone(), "bmV3LWNhbmFyeQ==").await,
        "the copy in {a} stays"
    );

    // A SecSynch naming a namespace the flow's ServiceAccount may not write: its copy runs as
    // that account, so it fails naming the missing right and nothing is written there.
    apply(&client, secsynch(&ns, "escape", &[&c])).await;
    eventually(90, "escape failed", || async {
        let ready = ready_of(&synchs, "escape").await;
        ready["status"] == "False" && ready["reason"] == "Failed"
    })
    .await;
    let ready = ready_of(&synchs, "escape").await;
    let message = ready["message"].as_str().unwrap_or_default();
    // The namespace is named as the object lists it, or `[redacted]`: the flow's vars hold the
    // object's namespaces (its `eval`), and redaction no longer spares a value because the
    // tenant's object holds it (docs/security.md, "Secrets stay in Secrets"); the loop index
    // still says which of `destinationNamespaces` failed.
    let named = |ns: &str| message.contains(ns) || message.contains("namespace \"[redacted]\"");
    assert!(
        message.contains("secrets") && message.contains("forbidden") && named(c.as_str()),
        "{ready:#}"
    );
    let secrets_c: Api<Secret> = Api::namespaced(client.clone(), &c);
    assert!(secrets_c
        .get_opt("registry-credentials")
        .await
        .unwrap()
        .is_none());

    // The data is nowhere a reader of the flows or the SecSynches can look.
    let lp = kube::api::ListParams::default();
    let leaked = |text: String| text.contains("c3luYy1jYW5hcnk") || text.contains("bmV3LWNhbmFyeQ");
    for f in crate::common::flows(&client, &ns).list(&lp).await.unwrap() {
        assert!(!leaked(f.data.to_string()), "{:?}", f.metadata.name);
    }
    for s in synchs.list(&lp).await.unwrap() {
        assert!(!leaked(s.data.to_string()), "{:?}", s.metadata.name);
    }
    for e in Api::<Event>::namespaced(client.clone(), &ns)
        .list(&lp)
        .await
        .unwrap()
    {
        assert!(!leaked(serde_json::to_string(&e).unwrap()), "{e:?}");
    }

    // The seed's part 3.1: deleting the SecSynch deletes its copies; the source stays.
    synchs
        .delete("secretsync-a", &DeleteParams::default())
        .await
        .unwrap();
    eventually(90, "secretsync-a is gone", || async {
        synchs.get_opt("secretsync-a").await.unwrap().is_none()
    })
    .await;
    for target in [&a, &b] {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), target);
        let copy = secrets.get_opt("registry-credentials").await.unwrap();
        assert!(copy.is_none(), "the copy in {target} is deleted");
    }
    let source: Api<Secret> = Api::namespaced(client.clone(), &ns);
    assert!(source
        .get_opt("registry-credentials")
        .await
        .unwrap()
        .is_some());
    ctl.abort();
}

/// Seed 002's flow and RBAC in `ns` (targets `team-a`/`team-b` renamed to `ns-a`/`ns-b`; `ns-c`
/// exists with no right granted there), the source Secret, and a controller; the SecSynch API.
async fn secret_sync_setup(
    prefix: &str,
) -> (
    kube::Client,
    String,
    Api<DynamicObject>,
    tokio::task::JoinHandle<()>,
) {
    let (client, ns) = prepare(prefix, json!([]), json!([])).await;
    let synchs = install_seed_crd(&client, &ns, "secret-sync-crd.yaml", SECSYNCH_KIND).await;
    let (a, b, c) = (format!("{ns}-a"), format!("{ns}-b"), format!("{ns}-c"));
    for target in [&a, &b, &c] {
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
    apply(&client, registry_credentials(&ns, "c3luYy1jYW5hcnk=")).await;
    let ctl = start_controller(&client, &ns);
    apply(
        &client,
        documents_renamed("secret-sync.yaml", &ns, &renames).remove(0),
    )
    .await;
    (client, ns, synchs, ctl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secsynch_neither_overwrites_nor_deletes_a_same_named_secret_it_did_not_copy() {
    use k8s_openapi::api::core::v1::Secret;
    let (client, ns, synchs, ctl) = secret_sync_setup("kopf-theirs").await;
    let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
    // Someone else's Secret, already there under the copy's name (and type).
    let theirs: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "registry-credentials", "namespace": a},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "{\"auths\":{\"theirs\":{}}}"}}))
    .unwrap();
    let in_a: Api<Secret> = Api::namespaced(client.clone(), &a);
    let pp = kube::api::PostParams {
        field_manager: Some("team-a-admin".into()),
        ..Default::default()
    };
    let before = in_a.create(&pp, &theirs).await.unwrap();
    // b first: the loop stops at the namespace whose Secret is not its own.
    apply(&client, secsynch(&ns, "secretsync-a", &[&b, &a])).await;
    eventually(90, "secretsync-a settled", || async {
        let ready = ready_of(&synchs, "secretsync-a").await;
        ready["status"] == "True" || ready["reason"] == "Failed"
    })
    .await;
    let unchanged = |s: Option<Secret>| {
        s.is_some_and(|s| {
            s.metadata.uid == before.metadata.uid
                && s.metadata.resource_version == before.metadata.resource_version
                && s.data.unwrap_or_default()[".dockerconfigjson"].0
                    == br#"{"auths":{"theirs":{}}}"#
        })
    };
    assert!(
        unchanged(in_a.get_opt("registry-credentials").await.unwrap()),
        "their Secret was overwritten"
    );
    let ready = ready_of(&synchs, "secretsync-a").await;
    let message = ready["message"].as_str().unwrap_or_default();
    assert_eq!(ready["status"], "False", "{ready:#}");
    // The namespace as listed, or `[redacted]` (see the seed 002 test above).
    let target = [
        format!("{a}/registry-credentials"),
        "[redacted]/registry-credentials".into(),
    ];
    assert!(
        target.iter().any(|t| message.contains(t.as_str()))
            && message.contains("team-a-admin")
            && message.contains("not overwritten"),
        "the status names the owner in the way: {ready:#}"
    );
    // The namespace holding no one else's Secret gets its copy.
    let in_b: Api<Secret> = Api::namespaced(client.clone(), &b);
    eventually(60, "the copy in b", || async {
        in_b.get_opt("registry-credentials")
            .await
            .unwrap()
            .is_some()
    })
    .await;
    // Deleted, the SecSynch takes its own copy with it and leaves theirs.
    synchs
        .delete("secretsync-a", &DeleteParams::default())
        .await
        .unwrap();
    eventually(90, "secretsync-a is gone", || async {
        synchs.get_opt("secretsync-a").await.unwrap().is_none()
    })
    .await;
    assert!(
        in_b.get_opt("registry-credentials")
            .await
            .unwrap()
            .is_none(),
        "its own copy is deleted"
    );
    assert!(
        unchanged(in_a.get_opt("registry-credentials").await.unwrap()),
        "their Secret was deleted or changed"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secsynch_naming_a_namespace_it_may_not_write_is_deleted_with_a_warning() {
    let (client, ns, synchs, ctl) = secret_sync_setup("kopf-unwritable").await;
    let c = format!("{ns}-c");
    apply(&client, secsynch(&ns, "escape", &[&c])).await;
    eventually(90, "escape failed", || async {
        ready_of(&synchs, "escape").await["status"] == "False"
    })
    .await;
    synchs
        .delete("escape", &DeleteParams::default())
        .await
        .unwrap();
    eventually(90, "escape is gone", || async {
        synchs.get_opt("escape").await.unwrap().is_none()
    })
    .await;
    // Served in the object (seed 002 needs no pod): the Events are the SecSynch's own.
    let events = Api::<Event>::namespaced(client.clone(), &ns)
        .list(
            &ListParams::default()
                .fields("involvedObject.kind=SecSynch,involvedObject.name=escape"),
        )
        .await
        .unwrap()
        .items;
    let warned = events.iter().any(|e| {
        e.type_.as_deref() == Some("Warning")
            && e.message
                .as_deref()
                .is_some_and(|m| m.contains("onDelete") && m.contains(c.as_str()))
    });
    let told: Vec<_> = events
        .iter()
        .map(|e| format!("{:?} {:?}: {:?}", e.type_, e.reason, e.message))
        .collect();
    assert!(warned, "a Warning names the delete that failed: {told:#?}");
    ctl.abort();
}

const BUNDLE_KIND: (&str, &str, &str, &str) = ("operator.werf.dev", "v1", "Bundle", "bundles");

/// A Bundle in the seed's format, naming the bundle ConfigMap by `repo`, values in `env` and,
/// when given, the values ConfigMap by `values`.
fn bundle(ns: &str, image: &str, values: Option<&str>) -> Value {
    let mut b = json!({"apiVersion": "operator.werf.dev/v1", "kind": "Bundle",
        "metadata": {"name": "myapp", "namespace": ns},
        "spec": {"registry": "registry.example.com", "repo": "myapp-bundle", "version": "1.0.0",
            "env": {"image": image}}});
    if let Some(values) = values {
        b["spec"]["values"] = json!(values);
    }
    b
}

/// The values ConfigMap a Bundle names by `spec.values`: each data key is one value.
fn bundle_values(ns: &str, image: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "myapp-values", "namespace": ns}, "data": {"image": image}})
}

/// What the flow's last step logs for release `myapp` deployed with `image`, values from `from`.
fn deployed_with(image: &str, from: &str) -> String {
    format!("release myapp of registry.example.com/myapp-bundle:1.0.0 deployed with {image} (values: {from})")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_werf_bundle_operator_of_seed_003_deploys_each_bundle_and_dismisses_it_on_delete() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    let (client, ns) = prepare("kopf-werf", json!([]), json!([])).await;
    let bundles = install_seed_crd(&client, &ns, "werf-bundle-crd.yaml", BUNDLE_KIND).await;
    for doc in documents_in("rbac/werf-bundle.yaml", &ns) {
        apply_value(&client, doc, None).await.unwrap();
    }
    apply(&client, documents_in("bundles/myapp.yaml", &ns).remove(0)).await;
    let ctl = start_controller(&client, &ns);
    apply(&client, documents_in("werf-bundle.yaml", &ns).remove(0)).await;
    apply(&client, bundle(&ns, "nginx:1.27", None)).await;
    let child = child_name("werf-bundle", &ns, "myapp");
    let status = crate::common::wait_status(&client, &ns, &child, 120, "a deploy", |s| {
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
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    services.get("myapp").await.unwrap();
    let events = event_messages(&client, &ns, &child).await;
    let deployed = deployed_with("nginx:1.27", "spec.env");
    assert!(events.contains(&deployed), "{events:#?}");

    // New values in the Bundle are deployed at once (no schedule to wait for).
    apply(&client, bundle(&ns, "nginx:1.28", None)).await;
    eventually(60, "nginx:1.28 is deployed", || async {
        image(&deployments.get("myapp").await.unwrap()).as_deref() == Some("nginx:1.28")
    })
    .await;
    crate::common::wait_status(&client, &ns, "werf-bundle", 60, "the deploy ends", |s| {
        s["bound"]["running"] == 1
    })
    .await;

    // A newly published bundle (the ConfigMap's data) deploys within seconds, as the kopf
    // operator's digest check and its values-ConfigMap handler did.
    let mut published = documents_in("bundles/myapp.yaml", &ns).remove(0);
    let text = published["data"]["bundle.yaml"].as_str().unwrap();
    assert!(text.contains("replicas: 2"));
    published["data"]["bundle.yaml"] = json!(text.replace("replicas: 2", "replicas: 3"));
    apply(&client, published).await;
    eventually(30, "the new bundle is deployed", || async {
        let d = deployments.get("myapp").await.unwrap();
        d.spec.as_ref().unwrap().replicas == Some(3)
    })
    .await;
    let flow = crate::common::flows(&client, &ns)
        .get(&child)
        .await
        .unwrap();
    // Named by both related references of a Bundle without spec.values, it is one change.
    assert_eq!(
        flow.data["spec"]["bound"]["trigger"]["changed"],
        json!(["ConfigMap/myapp-bundle"])
    );

    // A values ConfigMap that does not exist yet: deployed with spec.env alone (the seed's
    // `with suppress(Exception)`), and the run's log says so.
    apply(&client, bundle(&ns, "nginx:1.28", Some("myapp-values"))).await;
    let missing = deployed_with(
        "nginx:1.28",
        "spec.env only: ConfigMap myapp-values not found",
    );
    eventually(60, "a deploy without the values ConfigMap", || async {
        let events = event_messages(&client, &ns, &child).await;
        events.contains(&missing)
    })
    .await;
    let d = deployments.get("myapp").await.unwrap();
    assert_eq!(image(&d).as_deref(), Some("nginx:1.28"));

    // Its creation, then an edit of its data, each deploy its values within seconds (the seed's
    // @kopf.on.field('configmap', field='data')); they override spec.env's.
    for value in ["nginx:1.29", "nginx:1.27"] {
        apply(&client, bundle_values(&ns, value)).await;
        let what = format!("{value} from the values ConfigMap is deployed");
        eventually(30, &what, || async {
            image(&deployments.get("myapp").await.unwrap()).as_deref() == Some(value)
        })
        .await;
        let flow = crate::common::flows(&client, &ns)
            .get(&child)
            .await
            .unwrap();
        let changed = &flow.data["spec"]["bound"]["trigger"]["changed"];
        assert_eq!(*changed, json!(["ConfigMap/myapp-values"]), "{value}");
        let logged = deployed_with(value, "spec.env and ConfigMap myapp-values");
        eventually(60, "the deploy's log", || async {
            let events = event_messages(&client, &ns, &child).await;
            events.contains(&logged)
        })
        .await;
    }

    // Deleting the Bundle dismisses the release before the Bundle goes.
    bundles
        .delete("myapp", &DeleteParams::default())
        .await
        .unwrap();
    eventually(90, "the Bundle is gone", || async {
        bundles.get_opt("myapp").await.unwrap().is_none()
    })
    .await;
    assert!(deployments.get_opt("myapp").await.unwrap().is_none());
    assert!(services.get_opt("myapp").await.unwrap().is_none());
    ctl.abort();
}
