//! Section `seed-kopf` (8): a seed's own kopf operator, as the seed writes it, against the flow
//! we ship for it, side by side on one cluster, each in a fresh namespace and as its own process.
//! Seed 001: its `Database` operator (bench/kopf/seed001.py, the seed's Python unchanged, run
//! with `kopf run --verbose` as the seed runs it) against examples/kopf/database.yaml as shipped
//! (with examples/kopf/rbac/database.yaml, served by the release `pseudoflow-controller`), both
//! on the seed's CRD (examples/kopf/database-crd.yaml). On the simulated kubelet the images
//! `postgres:*` and `mysql:*` are declared stand-ins that sleep (testenv/src/standins.rs): the
//! bench's image map adds only the executor image, so the pods become and stay Ready.
//!
//! Per driver: a warm-up Database created and deleted (the operator is up and serving), then
//! `PSEUDOFLOW_BENCH_SEED_OBJECTS` (100) Databases, half `postgres-<i>` (15.3) and half
//! `mysql-<i>` (8.0), each with its `<name>-credentials` Secret created before any of them
//! (untimed), created at once: timed until every Database's pod `<name>-pod` is Running and
//! Ready and — for the flow, which writes it; the seed's kopf code never sets a phase — every
//! Database's `status.phase` is `Running`. Then all deleted at once: timed until every Database
//! and every pod is gone. Timed by watches (reflectors on Databases and pods), not polls.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, store::Writer, ObjectRef, Store};
use kube::runtime::watcher;
use kube::Client;
use pseudoflow_testenv::{apply, TestEnv};
use serde_json::{json, Value};

use crate::api_load::{self, Requests};
use crate::common::{self, Row};
use crate::kopf::{row, spawn_kopf, Operator};
use crate::process::ControllerProcess;

/// Who serves the Databases, in the order they are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    /// examples/kopf/database.yaml as shipped.
    Flow,
    /// bench/kopf/seed001.py: the seed's kopf code.
    Kopf,
}

impl Driver {
    fn name(self) -> &'static str {
        match self {
            Driver::Flow => "PseudoFlow examples/kopf/database.yaml as shipped (release `pseudoflow-controller` process)",
            Driver::Kopf => "seed 001's kopf code as written (bench/kopf/seed001.py, `kopf run --verbose`, kopf 1.45.2)",
        }
    }
}

/// The seed's `Database` kind.
fn databases_resource() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Database".into(),
        plural: "databases".into(),
    }
}

/// Every document of examples/kopf/`path`, moved into `ns` (RoleBinding subjects too).
fn documents_in(repo: &Path, path: &str, ns: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo.join("examples/kopf").join(path)).unwrap();
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut v: Value = serde::Deserialize::deserialize(doc).unwrap();
        v["metadata"]["namespace"] = json!(ns);
        for subject in v
            .get_mut("subjects")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            subject["namespace"] = json!(ns);
        }
        docs.push(v);
    }
    docs
}

/// The Databases of one measurement: half postgres, half mysql (the handler and the flow pick
/// the image by name), with the versions the seed uses.
fn names(prefix: &str, n: usize) -> Vec<(String, &'static str)> {
    (0..n)
        .map(|i| match i % 2 {
            0 => (format!("postgres-{prefix}{i}"), "15.3"),
            _ => (format!("mysql-{prefix}{i}"), "8.0"),
        })
        .collect()
}

fn secret(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{name}-credentials"), "namespace": ns},
        "stringData": {"password": "bench-password"}})
}

fn database(ns: &str, name: &str, version: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Database",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"version": version, "size": "1Gi"}})
}

/// The Databases and pods of one namespace, as two reflectors see them.
struct Watched {
    ns: String,
    databases: Store<DynamicObject>,
    pods: Store<Pod>,
}

impl Watched {
    /// Whether Database `name` is served: its pod Running and Ready, and its phase `Running`
    /// when `phase` (the flow writes it; the seed's kopf code does not).
    fn created(&self, name: &str, phase: bool) -> bool {
        let pod = self
            .pods
            .get(&ObjectRef::new(&format!("{name}-pod")).within(&self.ns));
        let pod_ready = pod.is_some_and(|p| {
            let status = p.status.as_ref();
            status.and_then(|s| s.phase.as_deref()) == Some("Running")
                && status
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        let db = self
            .databases
            .get(&ObjectRef::new_with(name, databases_resource()).within(&self.ns));
        let running = db.is_some_and(|d| d.data["status"]["phase"] == "Running");
        pod_ready && (running || !phase)
    }

    /// Whether Database `name` and its pod are both gone.
    fn gone(&self, name: &str) -> bool {
        let pod = ObjectRef::new(&format!("{name}-pod")).within(&self.ns);
        let db = ObjectRef::new_with(name, databases_resource()).within(&self.ns);
        self.pods.get(&pod).is_none() && self.databases.get(&db).is_none()
    }
}

/// Watches the namespace's Databases and pods until `done` holds for every one of `names`, or
/// `timeout`; says how far it got every 30 s. Returns how many were done at the end.
async fn wait_all(
    client: &Client,
    ns: &str,
    names: &[String],
    timeout: Duration,
    what: &str,
    done: impl Fn(&Watched, &str) -> bool,
) -> usize {
    let dbs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &databases_resource());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let db_writer = Writer::new(databases_resource());
    let pod_writer = Writer::default();
    let watched = Watched {
        ns: ns.to_string(),
        databases: db_writer.as_reader(),
        pods: pod_writer.as_reader(),
    };
    let db_events = reflector::reflector(db_writer, watcher::watcher(dbs, Default::default()));
    let pod_events = reflector::reflector(pod_writer, watcher::watcher(pods, Default::default()));
    let mut events = futures::stream::select(
        db_events.map(|_| ()).boxed(),
        pod_events.map(|_| ()).boxed(),
    );
    let t = Instant::now();
    let mut last_print = Instant::now();
    let count = |w: &Watched| names.iter().filter(|n| done(w, n)).count();
    let wait = async {
        while events.next().await.is_some() {
            let ready = watched
                .databases
                .wait_until_ready()
                .now_or_never()
                .is_some()
                && watched.pods.wait_until_ready().now_or_never().is_some();
            if !ready {
                continue;
            }
            if count(&watched) == names.len() {
                return;
            }
            if last_print.elapsed() > Duration::from_secs(30) {
                println!(
                    "seed-kopf {ns}: {what} {}/{} after {:.0} s",
                    count(&watched),
                    names.len(),
                    t.elapsed().as_secs_f64()
                );
                last_print = Instant::now();
            }
        }
    };
    let _ = tokio::time::timeout(timeout, wait).await;
    count(&watched)
}

/// Deletes the namespace's Databases `names`, 32 at a time, as a client deleting many would.
async fn delete_all(client: &Client, ns: &str, names: &[String]) {
    let dbs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &databases_resource());
    futures::stream::iter(names)
        .map(|name| {
            let dbs = dbs.clone();
            async move { dbs.delete(name, &DeleteParams::default()).await.unwrap() }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// Installs the seed's CRD (examples/kopf/database-crd.yaml) and waits until it is served.
async fn install_database_crd(client: &Client, repo: &Path) {
    let text = std::fs::read_to_string(repo.join("examples/kopf/database-crd.yaml")).unwrap();
    apply::apply_text(client, &text, None).await.unwrap();
    let dbs: Api<DynamicObject> = Api::all_with(client.clone(), &databases_resource());
    let deadline = Instant::now() + Duration::from_secs(30);
    while dbs.list(&Default::default()).await.is_err() {
        assert!(Instant::now() < deadline, "Databases not served in 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start(
    env: &TestEnv,
    client: &Client,
    dir: &Path,
    repo: &Path,
    ns: &str,
    driver: Driver,
) -> Operator {
    match driver {
        Driver::Flow => {
            for doc in documents_in(repo, "rbac/database.yaml", ns) {
                apply::apply_value(client, doc, None).await.unwrap();
            }
            let p = ControllerProcess::spawn(env, dir, ns, &format!("{ns}-controller.log"));
            let flow = documents_in(repo, "database.yaml", ns).remove(0);
            apply::apply_value(client, flow, None).await.unwrap();
            Operator::Flow(p)
        }
        Driver::Kopf => spawn_kopf(env, dir, ns, "seed001.py", &["--verbose"]),
    }
}

/// One driver's times (None: not done in time), with what each cost, as notes.
struct Measured {
    create: Option<Duration>,
    delete: Option<Duration>,
    create_note: String,
    delete_note: String,
}

/// Creates `dbs` (their Secrets first, untimed) and waits until they are served; then deletes
/// them and waits until they and their pods are gone. The API requests of each, by verb and
/// resource, are written to `dir` (`<ns>-requests-{create,delete}-<n>.txt`).
async fn measure(
    (client, dir): (&Client, &Path),
    ns: &str,
    dbs: &[(String, &str)],
    phase: bool,
    timeout: Duration,
    op: &Operator,
) -> Measured {
    let names: Vec<String> = dbs.iter().map(|(n, _)| n.clone()).collect();
    common::apply_all(client, names.iter().map(|n| secret(ns, n))).await;
    api_load::settle(client).await;
    let (before, cpu) = (Requests::now(client).await, op.cpu_seconds());
    let t = Instant::now();
    let created = common::apply_all(client, dbs.iter().map(|(n, v)| database(ns, n, v))).await;
    let served = wait_all(client, ns, &names, timeout, "served", |w, n| {
        w.created(n, phase)
    })
    .await;
    let took = t.elapsed();
    let requests = before.until(&Requests::now(client).await);
    let n = names.len();
    requests.save(&dir.join(format!("{ns}-requests-create-{n}.txt")), n);
    let create = (served == names.len()).then_some(took);
    let create_note = format!(
        "{served}/{} served; all created in {}; {}; CPU {:.1} s (operator), {:.1} s (kube-apiserver)",
        names.len(),
        common::secs(created),
        requests.per_object(names.len()),
        op.cpu_seconds() - cpu,
        requests.apiserver_cpu()
    );
    api_load::settle(client).await;
    let (before, cpu) = (Requests::now(client).await, op.cpu_seconds());
    let t = Instant::now();
    delete_all(client, ns, &names).await;
    let gone = wait_all(client, ns, &names, timeout, "gone", |w, n| w.gone(n)).await;
    let took = t.elapsed();
    let requests = before.until(&Requests::now(client).await);
    requests.save(&dir.join(format!("{ns}-requests-delete-{n}.txt")), n);
    let delete = (gone == names.len()).then_some(took);
    let delete_note = format!(
        "{gone}/{} gone; {}; CPU {:.1} s (operator), {:.1} s (kube-apiserver)",
        names.len(),
        requests.per_object(names.len()),
        op.cpu_seconds() - cpu,
        requests.apiserver_cpu()
    );
    Measured {
        create,
        delete,
        create_note,
        delete_note,
    }
}

/// The section's rows: each driver's create and delete, kopf's with the flow's ratio.
pub async fn run(
    env: &TestEnv,
    client: &Client,
    dir: &Path,
    repo: &Path,
    objects: usize,
    timeout: Duration,
) -> Vec<Row> {
    install_database_crd(client, repo).await;
    let mut rows = Vec::new();
    let mut flow_figures = Vec::new();
    for driver in [Driver::Flow, Driver::Kopf] {
        let ns = env
            .namespace(match driver {
                Driver::Flow => "seedflow",
                Driver::Kopf => "seedkopf",
            })
            .await
            .unwrap();
        let phase = driver == Driver::Flow;
        api_load::settle(client).await;
        let op = start(env, client, dir, repo, &ns, driver).await;
        // Warm-up: one Database served and deleted, so that neither start-up is timed.
        let warm = names("warm", 1);
        let warmed = measure(
            (client, dir),
            &ns,
            &warm,
            phase,
            Duration::from_secs(120),
            &op,
        )
        .await;
        assert!(
            warmed.create.is_some() && warmed.delete.is_some(),
            "{}: warm-up Database not served and deleted in 120 s ({} / {}; logs in {})",
            driver.name(),
            warmed.create_note,
            warmed.delete_note,
            dir.display()
        );
        let m = measure((client, dir), &ns, &names("", objects), phase, timeout, &op).await;
        let peak = op.peak_kib() as f64 / 1024.0;
        op.stop().await;
        let against: &[Duration] = if driver == Driver::Kopf {
            &flow_figures
        } else {
            &[]
        };
        let wall = |d: Option<Duration>| {
            d.map_or_else(
                || format!("not done after {}", common::secs(timeout)),
                common::secs,
            )
        };
        let what = match phase {
            true => "every pod Running and Ready, every Database `Running`",
            false => "every pod Running and Ready (the seed's code sets no phase)",
        };
        rows.push(row(
            format!("8. seed 001: {objects} Databases created at once → {what}"),
            driver.name(),
            wall(m.create),
            against,
            0,
            m.create.unwrap_or(timeout),
            format!("peak RSS (VmHWM) {peak:.1} MiB; {}", m.create_note),
        ));
        rows.push(row(
            format!(
                "8. seed 001: {objects} Databases deleted at once → every Database and pod gone"
            ),
            driver.name(),
            wall(m.delete),
            against,
            1,
            m.delete.unwrap_or(timeout),
            format!("peak RSS (VmHWM) {peak:.1} MiB; {}", m.delete_note),
        ));
        if driver == Driver::Flow {
            flow_figures = vec![m.create.unwrap_or(timeout), m.delete.unwrap_or(timeout)];
        }
        common::print_partial(&rows);
    }
    rows
}
