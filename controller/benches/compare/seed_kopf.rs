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
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, store::Writer, ObjectRef, Store};
use kube::runtime::watcher;
use kube::Client;
use pseudoflow_test_support::kopf_examples::documents_renamed;
use pseudoflow_testenv::{apply, TestEnv};
use serde_json::{json, Value};

use crate::api_load;
use crate::common::Row;
use crate::kopf::{spawn_kopf, Operator};
use crate::process::ControllerProcess;
use crate::seed_phases::{self, Driver, Measured, Phase, Table};

/// The driver's name in the rows.
fn name(driver: Driver) -> &'static str {
    match driver {
        Driver::Flow => "PseudoFlow examples/kopf/database.yaml as shipped (release `pseudoflow-controller` process)",
        Driver::Kopf => "seed 001's kopf code as written (bench/kopf/seed001.py, `kopf run --verbose`, kopf 1.45.2)",
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
    let events = futures::stream::select(
        db_events.map(|_| ()).boxed(),
        pod_events.map(|_| ()).boxed(),
    );
    let ready = || {
        watched
            .databases
            .wait_until_ready()
            .now_or_never()
            .is_some()
            && watched.pods.wait_until_ready().now_or_never().is_some()
    };
    let count = || names.iter().filter(|n| done(&watched, n)).count();
    let label = format!("seed-kopf {ns}: {what}");
    seed_phases::wait_until(events, ready, count, names.len(), (timeout, &label)).await
}

async fn start(env: &TestEnv, client: &Client, dir: &Path, ns: &str, driver: Driver) -> Operator {
    match driver {
        Driver::Flow => {
            for doc in documents_renamed("rbac/database.yaml", ns, &[]) {
                apply::apply_value(client, doc, None).await.unwrap();
            }
            let p = ControllerProcess::spawn(env, dir, ns, &format!("{ns}-controller.log"));
            let flow = documents_renamed("database.yaml", ns, &[]).remove(0);
            apply::apply_value(client, flow, None).await.unwrap();
            Operator::Flow(p)
        }
        Driver::Kopf => spawn_kopf(env, dir, ns, "seed001.py", &["--verbose"]),
    }
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
    let secrets = names.iter().map(|n| secret(ns, n)).collect();
    let objects = dbs.iter().map(|(n, v)| database(ns, n, v)).collect();
    let wait = async |p| match p {
        Phase::Create => {
            let served = |w: &Watched, n: &str| w.created(n, phase);
            wait_all(client, ns, &names, timeout, "served", served).await
        }
        Phase::Delete => wait_all(client, ns, &names, timeout, "gone", Watched::gone).await,
    };
    let kind = databases_resource();
    let at = (client, dir, ns);
    let words = ["served", "gone"];
    seed_phases::measure(at, op, (&kind, &names), (secrets, objects), wait, words).await
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
    let kind = databases_resource();
    seed_phases::install_crd(client, repo, "database-crd.yaml", &kind, "Databases").await;
    let mut table = Table::new(timeout);
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
        let op = start(env, client, dir, &ns, driver).await;
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
        warmed.assert_warm(name(driver), "Database", dir);
        let m = measure((client, dir), &ns, &names("", objects), phase, timeout, &op).await;
        let what = match phase {
            true => "every pod Running and Ready, every Database `Running`",
            false => "every pod Running and Ready (the seed's code sets no phase)",
        };
        let workloads = [
            format!("8. seed 001: {objects} Databases created at once → {what}"),
            format!(
                "8. seed 001: {objects} Databases deleted at once → every Database and pod gone"
            ),
        ];
        table.add(op, (name(driver), phase), workloads, &m).await;
    }
    table.rows()
}
