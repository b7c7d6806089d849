//! What the two seed-kopf sections (`seed_kopf.rs`, seed 001; `seed002_kopf.rs`, seed 002)
//! share, whatever the seed's kind: its CRD installed, its objects deleted as a client deleting
//! many would, a watch waited on with progress lines, each phase timed and priced, and the two
//! rows a driver's figures make. Each section keeps only its kind, its objects and what "done"
//! means for them.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::discovery::ApiResource;
use kube::Client;
use pseudoflow_testenv::apply;
use serde_json::Value;

use crate::api_load::{self, Requests};
use crate::common::{self, Row};
use crate::kopf::{row, Operator};

/// Who serves a seed's objects, in the order they are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// The flow we ship for the seed (examples/kopf/), served by the release
    /// `pseudoflow-controller`.
    Flow,
    /// The seed's kopf operator (bench/kopf/), run by `kopf run`.
    Kopf,
}

/// Installs the CRD of examples/kopf/`file` and waits until `kind` is served; `plural` names
/// the kind in the failure ("Databases").
pub async fn install_crd(
    client: &Client,
    repo: &Path,
    file: &str,
    kind: &ApiResource,
    plural: &str,
) {
    let text = std::fs::read_to_string(repo.join("examples/kopf").join(file)).unwrap();
    apply::apply_text(client, &text, None).await.unwrap();
    let all: Api<DynamicObject> = Api::all_with(client.clone(), kind);
    let deadline = Instant::now() + Duration::from_secs(30);
    while all.list(&Default::default()).await.is_err() {
        assert!(Instant::now() < deadline, "{plural} not served in 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes the namespace's objects `names` of `kind`, 32 at a time, as a client deleting many
/// would.
async fn delete_all(client: &Client, ns: &str, kind: &ApiResource, names: &[String]) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, kind);
    futures::stream::iter(names)
        .map(|name| {
            let api = api.clone();
            async move { api.delete(name, &DeleteParams::default()).await.unwrap() }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// Reads `events` (the reflectors feeding what `done` counts) until, with every store `ready`,
/// `done()` reaches `total`, or `timeout`; prints `<label> <done>/<total> after <s> s` every
/// 30 s. Returns the last count.
pub async fn wait_until(
    events: impl Stream<Item = ()>,
    ready: impl Fn() -> bool,
    done: impl Fn() -> usize,
    total: usize,
    (timeout, label): (Duration, &str),
) -> usize {
    let t = Instant::now();
    let mut last_print = Instant::now();
    let wait = async {
        futures::pin_mut!(events);
        while events.next().await.is_some() {
            if !ready() {
                continue;
            }
            if done() == total {
                return;
            }
            if last_print.elapsed() > Duration::from_secs(30) {
                println!(
                    "{label} {}/{total} after {:.0} s",
                    done(),
                    t.elapsed().as_secs_f64()
                );
                last_print = Instant::now();
            }
        }
    };
    let _ = tokio::time::timeout(timeout, wait).await;
    done()
}

/// Runs `work` as one timed phase, once the API server has settled: its output, its wall time
/// and what it cost (requests per object of `n`, operator and kube-apiserver CPU). Its API
/// requests, by verb and resource, are written to `dir` (`<ns>-requests-<phase>-<n>.txt`).
async fn timed<T>(
    (client, dir): (&Client, &Path),
    (ns, phase, n): (&str, &str, usize),
    op: &Operator,
    work: impl Future<Output = T>,
) -> (T, Duration, String) {
    api_load::settle(client).await;
    let (before, cpu) = (Requests::now(client).await, op.cpu_seconds());
    let t = Instant::now();
    let out = work.await;
    let took = t.elapsed();
    let requests = before.until(&Requests::now(client).await);
    requests.save(&dir.join(format!("{ns}-requests-{phase}-{n}.txt")), n);
    let cost = format!(
        "{}; CPU {:.1} s (operator), {:.1} s (kube-apiserver)",
        requests.per_object(n),
        op.cpu_seconds() - cpu,
        requests.apiserver_cpu()
    );
    (out, took, cost)
}

/// The two timed phases of a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The objects created at once, until every one is served.
    Create,
    /// The objects deleted at once, until every one (and what it made) is gone.
    Delete,
}

/// Applies `secrets` (untimed), then creates `objects` at once and waits until `wait(Create)`
/// counts all of `names` served; then deletes them (`kind`) and waits until `wait(Delete)`
/// counts all gone. Each phase's API requests are written to `dir`
/// (`<ns>-requests-{create,delete}-<n>.txt`); `words` say what was counted in each note
/// ("served", "gone").
pub async fn measure(
    (client, dir, ns): (&Client, &Path, &str),
    op: &Operator,
    (kind, names): (&ApiResource, &[String]),
    (secrets, objects): (Vec<Value>, Vec<Value>),
    wait: impl AsyncFn(Phase) -> usize,
    words: [&str; 2],
) -> Measured {
    let n = names.len();
    common::apply_all(client, secrets.into_iter()).await;
    let ((created, served), took, cost) = timed((client, dir), (ns, "create", n), op, async {
        let created = common::apply_all(client, objects.into_iter()).await;
        (created, wait(Phase::Create).await)
    })
    .await;
    let create = (served == n).then_some(took);
    let create_note = format!(
        "{served}/{n} {}; all created in {}; {cost}",
        words[0],
        common::secs(created)
    );
    let (gone, took, cost) = timed((client, dir), (ns, "delete", n), op, async {
        delete_all(client, ns, kind, names).await;
        wait(Phase::Delete).await
    })
    .await;
    let delete = (gone == n).then_some(took);
    let delete_note = format!("{gone}/{n} {}; {cost}", words[1]);
    Measured {
        create,
        delete,
        create_note,
        delete_note,
    }
}

/// One driver's times (None: not done in time), with what each cost, as notes.
pub struct Measured {
    pub create: Option<Duration>,
    pub delete: Option<Duration>,
    pub create_note: String,
    pub delete_note: String,
}

impl Measured {
    /// Fails the bench unless the warm-up `one` ("Database") of `driver` was served and deleted
    /// (logs in `dir`).
    pub fn assert_warm(&self, driver: &str, one: &str, dir: &Path) {
        assert!(
            self.create.is_some() && self.delete.is_some(),
            "{driver}: warm-up {one} not served and deleted in 120 s ({} / {}; logs in {})",
            self.create_note,
            self.delete_note,
            dir.display()
        );
    }
}

/// A section's rows, driver by driver: the flow's first, then kopf's with the ratio of the
/// flow's figure to kopf's; a phase not done in `timeout` counts as `timeout`.
pub struct Table {
    timeout: Duration,
    rows: Vec<Row>,
    flow_figures: Vec<Duration>,
}

impl Table {
    /// A table with no rows yet, for phases given `timeout`.
    pub fn new(timeout: Duration) -> Table {
        Table {
            timeout,
            rows: Vec::new(),
            flow_figures: Vec::new(),
        }
    }

    /// Stops `op` and adds its `driver`'s two rows, `workloads` (create, delete), with what it
    /// measured and its peak RSS; prints the rows so far.
    pub async fn add(
        &mut self,
        op: Operator,
        (driver, is_flow): (&str, bool),
        workloads: [String; 2],
        m: &Measured,
    ) {
        let peak = op.peak_kib() as f64 / 1024.0;
        op.stop().await;
        let timeout = self.timeout;
        let wall = |d: Option<Duration>| {
            d.map_or_else(
                || format!("not done after {}", common::secs(timeout)),
                common::secs,
            )
        };
        let against: &[Duration] = if is_flow { &[] } else { &self.flow_figures };
        let phases = [(m.create, &m.create_note), (m.delete, &m.delete_note)];
        let figures: Vec<Duration> = phases.iter().map(|(d, _)| d.unwrap_or(timeout)).collect();
        for (i, (workload, (took, note))) in workloads.into_iter().zip(phases).enumerate() {
            let notes = format!("peak RSS (VmHWM) {peak:.1} MiB; {note}");
            let took_or = took.unwrap_or(timeout);
            let r = row(workload, driver, wall(took), against, i, took_or, notes);
            self.rows.push(r);
        }
        if is_flow {
            self.flow_figures = figures;
        }
        common::print_partial(&self.rows);
    }

    /// The rows, in the order they were added.
    pub fn rows(self) -> Vec<Row> {
        self.rows
    }
}
