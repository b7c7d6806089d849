//! Section `seed-kopf` (8, seed 002): seed 002's `SecSynch` controller as a kopf operator (our
//! port, bench/kopf/seed002.py: the seed describes a kubebuilder Go controller without its full
//! code) against examples/kopf/secret-sync.yaml as shipped (with
//! examples/kopf/rbac/secret-sync.yaml, its target namespaces renamed; served by the release
//! `pseudoflow-controller`), both on the seed's CRD shape (examples/kopf/secret-sync-crd.yaml),
//! each in a fresh namespace with two target namespaces of its own, each as its own process.
//!
//! Per driver: a warm-up SecSynch created and deleted (the operator is up and serving), then
//! `PSEUDOFLOW_BENCH_SEED_OBJECTS` (100) SecSynches, each naming a Secret of its own (created
//! before any of them, untimed) and the two target namespaces, created at once: timed until
//! every copy is present in both namespaces. Then all deleted at once: timed until every
//! SecSynch and every copy is gone. Timed by watches (reflectors on the SecSynches and on the
//! Secrets of both target namespaces), not polls.

use std::path::Path;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
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
        Driver::Flow => "PseudoFlow examples/kopf/secret-sync.yaml as shipped (release `pseudoflow-controller` process)",
        Driver::Kopf => "our kopf port of seed 002 (bench/kopf/seed002.py, `kopf run`, kopf 1.45.2)",
    }
}

/// The seed's `SecSynch` kind.
fn synchs_resource() -> ApiResource {
    ApiResource {
        group: "k8sasdb.org".into(),
        version: "v1alpha1".into(),
        api_version: "k8sasdb.org/v1alpha1".into(),
        kind: "SecSynch".into(),
        plural: "secsynches".into(),
    }
}

/// Every document of examples/kopf/`path`, its target namespaces `team-a`/`team-b` renamed to
/// `targets`, the rest moved into `ns` (RoleBinding subjects too). The target namespaces'
/// rights name the copy (`resourceNames: ["registry-credentials"]`): here they name the copies
/// of `secrets`, one per SecSynch, as an administrator granting this bench's copies would.
fn documents_in(path: &str, (ns, targets): (&str, &[String; 2]), secrets: &[String]) -> Vec<Value> {
    let copies = format!("resourceNames: {}", serde_json::to_string(secrets).unwrap());
    let renames = [
        ("team-a", targets[0].as_str()),
        ("team-b", targets[1].as_str()),
        (
            r#"resourceNames: ["registry-credentials"]"#,
            copies.as_str(),
        ),
    ];
    documents_renamed(path, ns, &renames)
}

/// The SecSynches of one measurement: `<prefix><i>`, each copying Secret `src-<prefix><i>`.
fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn source(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("src-{name}"), "namespace": ns},
        "stringData": {"token": "bench-token"}})
}

fn secsynch(ns: &str, name: &str, targets: &[String; 2]) -> Value {
    json!({"apiVersion": "k8sasdb.org/v1alpha1", "kind": "SecSynch",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"secretName": format!("src-{name}"), "destinationNamespaces": targets}})
}

/// The SecSynches of a namespace and the Secrets of its two target namespaces, as reflectors
/// see them.
struct Watched {
    ns: String,
    targets: [String; 2],
    synchs: Store<DynamicObject>,
    copies: [Store<Secret>; 2],
}

impl Watched {
    /// Whether SecSynch `name`'s copy is in both target namespaces.
    fn copied(&self, name: &str) -> bool {
        let secret = format!("src-{name}");
        (0..2).all(|i| {
            let r = ObjectRef::new(&secret).within(&self.targets[i]);
            self.copies[i].get(&r).is_some()
        })
    }

    /// Whether SecSynch `name` and both its copies are gone.
    fn gone(&self, name: &str) -> bool {
        let secret = format!("src-{name}");
        let synch = ObjectRef::new_with(name, synchs_resource()).within(&self.ns);
        self.synchs.get(&synch).is_none()
            && (0..2).all(|i| {
                let r = ObjectRef::new(&secret).within(&self.targets[i]);
                self.copies[i].get(&r).is_none()
            })
    }

    fn ready(&self) -> bool {
        let ready = |s: &Store<Secret>| s.wait_until_ready().now_or_never().is_some();
        self.synchs.wait_until_ready().now_or_never().is_some() && self.copies.iter().all(ready)
    }
}

/// Watches until `done` holds for every one of `names`, or `timeout`; says how far it got every
/// 30 s. Returns how many were done at the end.
async fn wait_all(
    client: &Client,
    (ns, targets): (&str, &[String; 2]),
    names: &[String],
    timeout: Duration,
    what: &str,
    done: impl Fn(&Watched, &str) -> bool,
) -> usize {
    let synchs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &synchs_resource());
    let synch_writer = Writer::new(synchs_resource());
    let (a_writer, b_writer) = (Writer::default(), Writer::default());
    let watched = Watched {
        ns: ns.to_string(),
        targets: targets.clone(),
        synchs: synch_writer.as_reader(),
        copies: [a_writer.as_reader(), b_writer.as_reader()],
    };
    let secrets = |i: usize| Api::<Secret>::namespaced(client.clone(), &targets[i]);
    let events = futures::stream::select_all([
        reflector::reflector(synch_writer, watcher::watcher(synchs, Default::default()))
            .map(|_| ())
            .boxed(),
        reflector::reflector(a_writer, watcher::watcher(secrets(0), Default::default()))
            .map(|_| ())
            .boxed(),
        reflector::reflector(b_writer, watcher::watcher(secrets(1), Default::default()))
            .map(|_| ())
            .boxed(),
    ]);
    let count = || names.iter().filter(|n| done(&watched, n)).count();
    let label = format!("seed-kopf 002 {ns}: {what}");
    let ready = || watched.ready();
    seed_phases::wait_until(events, ready, count, names.len(), (timeout, &label)).await
}

async fn start(
    (env, client): (&TestEnv, &Client),
    dir: &Path,
    (ns, targets): (&str, &[String; 2]),
    synchs: &[String],
    driver: Driver,
) -> Operator {
    match driver {
        Driver::Flow => {
            let copies: Vec<String> = synchs.iter().map(|n| format!("src-{n}")).collect();
            let at = (ns, targets);
            for doc in documents_in("rbac/secret-sync.yaml", at, &copies) {
                apply::apply_value(client, doc, None).await.unwrap();
            }
            let p = ControllerProcess::spawn(env, dir, ns, &format!("{ns}-controller.log"));
            let flow = documents_in("secret-sync.yaml", at, &[]).remove(0);
            apply::apply_value(client, flow, None).await.unwrap();
            Operator::Flow(p)
        }
        Driver::Kopf => spawn_kopf(env, dir, ns, "seed002.py", &[]),
    }
}

/// Creates SecSynches `names` (their Secrets first, untimed) and waits until every copy is
/// present; then deletes them and waits until they and their copies are gone. The API requests
/// of each are written to `dir` (`<ns>-requests-{create,delete}-<n>.txt`).
async fn measure(
    (client, dir): (&Client, &Path),
    (ns, targets): (&str, &[String; 2]),
    names: &[String],
    timeout: Duration,
    op: &Operator,
) -> Measured {
    let secrets = names.iter().map(|n| source(ns, n)).collect();
    let objects = names.iter().map(|n| secsynch(ns, n, targets)).collect();
    let at = (ns, targets);
    let wait = async |p| match p {
        Phase::Create => wait_all(client, at, names, timeout, "copied", Watched::copied).await,
        Phase::Delete => wait_all(client, at, names, timeout, "gone", Watched::gone).await,
    };
    let kind = synchs_resource();
    let words = ["copied into both namespaces", "gone with their copies"];
    let at = (client, dir, ns);
    seed_phases::measure(at, op, (&kind, names), (secrets, objects), wait, words).await
}

/// The section's rows for seed 002: each driver's create and delete, kopf's with the flow's
/// ratio.
pub async fn run(
    env: &TestEnv,
    client: &Client,
    dir: &Path,
    repo: &Path,
    objects: usize,
    timeout: Duration,
) -> Vec<Row> {
    let kind = synchs_resource();
    seed_phases::install_crd(client, repo, "secret-sync-crd.yaml", &kind, "SecSynches").await;
    let mut table = Table::new(timeout);
    for driver in [Driver::Flow, Driver::Kopf] {
        let prefix = match driver {
            Driver::Flow => "s2flow",
            Driver::Kopf => "s2kopf",
        };
        let ns = env.namespace(prefix).await.unwrap();
        let targets = [
            env.namespace(&format!("{prefix}-a")).await.unwrap(),
            env.namespace(&format!("{prefix}-b")).await.unwrap(),
        ];
        api_load::settle(client).await;
        let at = (ns.as_str(), &targets);
        let warm = names("warm", 1);
        let all: Vec<String> = warm.iter().cloned().chain(names("s", objects)).collect();
        let op = start((env, client), dir, at, &all, driver).await;
        // Warm-up: one SecSynch served and deleted, so that neither start-up is timed.
        let warmed = measure((client, dir), at, &warm, Duration::from_secs(120), &op).await;
        warmed.assert_warm(name(driver), "SecSynch", dir);
        let m = measure((client, dir), at, &names("s", objects), timeout, &op).await;
        let workloads = [
            format!("8. seed 002: {objects} SecSynches (2 namespaces each) created at once → every copy present"),
            format!("8. seed 002: {objects} SecSynches deleted at once → every SecSynch and copy gone"),
        ];
        let is_flow = driver == Driver::Flow;
        table.add(op, (name(driver), is_flow), workloads, &m).await;
    }
    table.rows()
}
