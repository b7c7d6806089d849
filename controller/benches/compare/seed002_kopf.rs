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
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
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

/// Who serves the SecSynches, in the order they are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    /// examples/kopf/secret-sync.yaml as shipped.
    Flow,
    /// bench/kopf/seed002.py: our kopf port.
    Kopf,
}

impl Driver {
    fn name(self) -> &'static str {
        match self {
            Driver::Flow => "PseudoFlow examples/kopf/secret-sync.yaml as shipped (release `pseudoflow-controller` process)",
            Driver::Kopf => "our kopf port of seed 002 (bench/kopf/seed002.py, `kopf run`, kopf 1.45.2)",
        }
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
fn documents_in(
    repo: &Path,
    path: &str,
    (ns, targets): (&str, &[String; 2]),
    secrets: &[String],
) -> Vec<Value> {
    let text = std::fs::read_to_string(repo.join("examples/kopf").join(path)).unwrap();
    let copies = serde_json::to_string(secrets).unwrap();
    let text = text
        .replace("team-a", &targets[0])
        .replace("team-b", &targets[1])
        .replace(
            r#"resourceNames: ["registry-credentials"]"#,
            &format!("resourceNames: {copies}"),
        );
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
    let t = Instant::now();
    let mut last_print = Instant::now();
    let count = |w: &Watched| names.iter().filter(|n| done(w, n)).count();
    let wait = async {
        futures::pin_mut!(events);
        while events.next().await.is_some() {
            if !watched.ready() {
                continue;
            }
            if count(&watched) == names.len() {
                return;
            }
            if last_print.elapsed() > Duration::from_secs(30) {
                println!(
                    "seed-kopf 002 {ns}: {what} {}/{} after {:.0} s",
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

/// Deletes the namespace's SecSynches `names`, 32 at a time, as a client deleting many would.
async fn delete_all(client: &Client, ns: &str, names: &[String]) {
    let synchs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &synchs_resource());
    futures::stream::iter(names)
        .map(|name| {
            let synchs = synchs.clone();
            async move { synchs.delete(name, &DeleteParams::default()).await.unwrap() }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// Installs the seed's CRD (examples/kopf/secret-sync-crd.yaml) and waits until it is served.
async fn install_crd(client: &Client, repo: &Path) {
    let text = std::fs::read_to_string(repo.join("examples/kopf/secret-sync-crd.yaml")).unwrap();
    apply::apply_text(client, &text, None).await.unwrap();
    let synchs: Api<DynamicObject> = Api::all_with(client.clone(), &synchs_resource());
    let deadline = Instant::now() + Duration::from_secs(30);
    while synchs.list(&Default::default()).await.is_err() {
        assert!(Instant::now() < deadline, "SecSynches not served in 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start(
    (env, client): (&TestEnv, &Client),
    (dir, repo): (&Path, &Path),
    (ns, targets): (&str, &[String; 2]),
    synchs: &[String],
    driver: Driver,
) -> Operator {
    match driver {
        Driver::Flow => {
            let copies: Vec<String> = synchs.iter().map(|n| format!("src-{n}")).collect();
            let at = (ns, targets);
            for doc in documents_in(repo, "rbac/secret-sync.yaml", at, &copies) {
                apply::apply_value(client, doc, None).await.unwrap();
            }
            let p = ControllerProcess::spawn(env, dir, ns, &format!("{ns}-controller.log"));
            let flow = documents_in(repo, "secret-sync.yaml", at, &[]).remove(0);
            apply::apply_value(client, flow, None).await.unwrap();
            Operator::Flow(p)
        }
        Driver::Kopf => spawn_kopf(env, dir, ns, "seed002.py", &[]),
    }
}

/// One driver's times (None: not done in time), with what each cost, as notes.
struct Measured {
    create: Option<Duration>,
    delete: Option<Duration>,
    create_note: String,
    delete_note: String,
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
    common::apply_all(client, names.iter().map(|n| source(ns, n))).await;
    api_load::settle(client).await;
    let (before, cpu) = (Requests::now(client).await, op.cpu_seconds());
    let t = Instant::now();
    let created = common::apply_all(client, names.iter().map(|n| secsynch(ns, n, targets))).await;
    let at = (ns, targets);
    let copied = wait_all(client, at, names, timeout, "copied", |w, n| w.copied(n)).await;
    let took = t.elapsed();
    let requests = before.until(&Requests::now(client).await);
    let n = names.len();
    requests.save(&dir.join(format!("{ns}-requests-create-{n}.txt")), n);
    let create = (copied == n).then_some(took);
    let create_note = format!(
        "{copied}/{n} copied into both namespaces; all created in {}; {}; CPU {:.1} s (operator), {:.1} s (kube-apiserver)",
        common::secs(created),
        requests.per_object(n),
        op.cpu_seconds() - cpu,
        requests.apiserver_cpu()
    );
    api_load::settle(client).await;
    let (before, cpu) = (Requests::now(client).await, op.cpu_seconds());
    let t = Instant::now();
    delete_all(client, ns, names).await;
    let gone = wait_all(client, at, names, timeout, "gone", |w, n| w.gone(n)).await;
    let took = t.elapsed();
    let requests = before.until(&Requests::now(client).await);
    requests.save(&dir.join(format!("{ns}-requests-delete-{n}.txt")), n);
    let delete = (gone == n).then_some(took);
    let delete_note = format!(
        "{gone}/{n} gone with their copies; {}; CPU {:.1} s (operator), {:.1} s (kube-apiserver)",
        requests.per_object(n),
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
    install_crd(client, repo).await;
    let mut rows = Vec::new();
    let mut flow_figures = Vec::new();
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
        let op = start((env, client), (dir, repo), at, &all, driver).await;
        // Warm-up: one SecSynch served and deleted, so that neither start-up is timed.
        let warmed = measure((client, dir), at, &warm, Duration::from_secs(120), &op).await;
        assert!(
            warmed.create.is_some() && warmed.delete.is_some(),
            "{}: warm-up SecSynch not served and deleted in 120 s ({} / {}; logs in {})",
            driver.name(),
            warmed.create_note,
            warmed.delete_note,
            dir.display()
        );
        let m = measure((client, dir), at, &names("s", objects), timeout, &op).await;
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
        rows.push(row(
            format!("8. seed 002: {objects} SecSynches (2 namespaces each) created at once → every copy present"),
            driver.name(),
            wall(m.create),
            against,
            0,
            m.create.unwrap_or(timeout),
            format!("peak RSS (VmHWM) {peak:.1} MiB; {}", m.create_note),
        ));
        rows.push(row(
            format!(
                "8. seed 002: {objects} SecSynches deleted at once → every SecSynch and copy gone"
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
