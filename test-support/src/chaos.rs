//! What the chaos tests share: the cluster (testenv with two extra tainted "edge" nodes that only
//! node steps reach, so one can die without disturbing other tests), seeded randomness, the
//! controller binary as a child process, a ledger of every Job created, append-only marker files,
//! and the checks that status agrees with the Jobs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use pseudoflow_testenv::procs::Proc;
use pseudoflow_testenv::{shared_with, NodeSpec, TestEnv};
use serde_json::Value;

/// Label of the edge nodes (`chaos.example.com/edge=true`); they carry a `NoSchedule` taint of
/// the same key, so only node-pinned step pods (which tolerate everything) run there.
pub const EDGE_LABEL: &str = "chaos.example.com/edge";
/// The edge nodes, for the node-death test.
pub const EDGE_NODES: [&str; 2] = ["edge-0", "edge-1"];

/// The cluster of the chaos binary: [`crate::options`] plus the edge nodes.
pub fn env() -> &'static TestEnv {
    shared_with(|| {
        let mut o = crate::options();
        for name in EDGE_NODES {
            let mut n = NodeSpec::worker(name);
            n.labels.insert(EDGE_LABEL.into(), "true".into());
            n.taints.push((EDGE_LABEL.into(), "NoSchedule".into()));
            o.nodes.push(n);
        }
        o
    })
    .unwrap_or_else(|e| panic!("testenv: {e}"))
}

/// Tests that restart the API server or etcd take this exclusively; every other chaos test
/// holds it shared, so they may overlap one another but never a control-plane restart.
pub fn cluster_lock() -> &'static tokio::sync::RwLock<()> {
    static LOCK: OnceLock<tokio::sync::RwLock<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::RwLock::new(()))
}

/// A small seeded generator (splitmix64): the same seed gives the same kill schedule.
pub struct Rng(u64);

impl Rng {
    /// The seed from `CHAOS_SEED` if set, else from the clock; printed, so a failure can be
    /// replayed with `CHAOS_SEED=<seed>`.
    pub fn from_env(test: &str) -> (Rng, u64) {
        let seed = std::env::var("CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("{test}: CHAOS_SEED={seed}");
        (Rng(seed), seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A duration uniformly in `[lo, hi)` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next_u64() % (hi - lo).max(1))
    }
}

/// How many kills the kill test makes: `CHAOS_KILLS`, else `default`.
pub fn kills_from_env(default: usize) -> usize {
    std::env::var("CHAOS_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The real controller binary, run as a child process against the cluster (admin kubeconfig),
/// crashed with SIGKILL and started again with the same arguments.
pub struct Controller {
    name: String,
    args: Vec<String>,
    /// Its namespace (`POD_NAMESPACE`), where it keeps its approval key, if it has one.
    key_namespace: Option<String>,
    proc: Option<Proc>,
    /// How many times it was started.
    pub starts: usize,
}

impl Controller {
    /// Starts `pseudoflow-controller` named `name` (its log: `logs/<name>.log` in the cluster's
    /// directory) watching `namespaces`, where node steps are allowed; with `lease_namespace`
    /// it runs with leader election there.
    pub fn start(name: &str, namespaces: &[String], lease_namespace: Option<&str>) -> Controller {
        let mut c = Controller::configured(name, namespaces, lease_namespace);
        c.restart();
        c
    }

    /// What [`Controller::start`] starts, not started yet.
    fn configured(name: &str, namespaces: &[String], lease_namespace: Option<&str>) -> Controller {
        let mut args = vec![
            "--image".to_string(),
            crate::IMAGE.to_string(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
            "--node-step-namespaces".into(),
            namespaces.join(","),
        ];
        for ns in namespaces {
            args.extend(["--namespace".to_string(), ns.clone()]);
        }
        if let Some(ns) = lease_namespace {
            args.extend([
                "--leader-election".to_string(),
                "--leader-election-namespace".into(),
                ns.to_string(),
            ]);
        }
        Controller {
            name: name.to_string(),
            args,
            key_namespace: None,
            proc: None,
            starts: 0,
        }
    }

    /// [`Controller::start`], its namespace being `key_namespace` (`POD_NAMESPACE`, as the
    /// chart's pod has): it makes or loads its approval key there, as the chart's controller does,
    /// so it seals served marks and progress records. Its restarts keep the key.
    pub fn start_with_key(name: &str, namespaces: &[String], key_namespace: &str) -> Controller {
        let mut c = Controller::configured(name, namespaces, None);
        c.key_namespace = Some(key_namespace.to_string());
        c.restart();
        c
    }

    /// Starts it (again).
    pub fn restart(&mut self) {
        let bin = crate::binaries::controller_binary();
        let mut envs = vec![
            ("RUST_LOG".to_string(), "info".to_string()),
            ("HOSTNAME".to_string(), self.name.clone()),
        ];
        if let Some(ns) = &self.key_namespace {
            envs.push(("POD_NAMESPACE".to_string(), ns.clone()));
        }
        self.proc = Some(
            env()
                .spawn(&self.name, Path::new(&bin), &self.args, &envs)
                .expect("starting pseudoflow-controller"),
        );
        self.starts += 1;
    }

    /// SIGKILL: the process dies wherever it is, writing nothing more.
    pub async fn kill(&mut self) {
        if let Some(p) = self.proc.as_mut() {
            p.kill().await.expect("killing the controller");
        }
        self.proc = None;
    }

    /// Panics (pointing at the log) if the process exited on its own.
    pub fn assert_running(&mut self, why: &str) {
        let status = self.proc.as_mut().and_then(|p| p.exit_status());
        assert!(
            status.is_none() && self.proc.is_some(),
            "{why}: controller {} is not running ({status:?}); see {}",
            self.name,
            self.log().display()
        );
    }

    /// Its log file.
    pub fn log(&self) -> PathBuf {
        env().dir().join("logs").join(format!("{}.log", self.name))
    }

    /// How many Jobs a later process launched again after an earlier one had launched them:
    /// each is a kill that landed between a Job's creation and the save of the run state that
    /// records it, after which the new process found the Job and adopted it. Read from the log,
    /// where every process starts with its "node steps allowed" line and logs "launched <Job>"
    /// for each Job it creates or adopts.
    pub fn relaunched_jobs(&self) -> usize {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let mut process = 0;
        let mut first: BTreeMap<String, usize> = BTreeMap::new();
        let mut again = BTreeSet::new();
        for line in text.lines() {
            if line.contains("node steps allowed") {
                process += 1;
            } else if let Some(rest) = line.split("launched ").nth(1) {
                let job = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                match first.get(&job) {
                    Some(p) if *p != process => {
                        again.insert(job);
                    }
                    Some(_) => {}
                    None => {
                        first.insert(job, process);
                    }
                }
            }
        }
        again.len()
    }
}

/// One Job creation as the test saw it.
#[derive(Debug, Clone)]
pub struct SeenJob {
    /// The Job's name.
    pub name: String,
    /// Its uid: a Job made twice under one name has two.
    pub uid: String,
    /// (flow, run, DAG node, instance, attempt) from its labels and annotations.
    pub key: (String, String, String, String, String),
    /// When the test first saw it.
    pub seen_at: Instant,
}

/// Every Job created in some namespaces, recorded by watching (re-listing after a lost watch)
/// from before the first flow starts; [`Ledger::sweep`] adds any a lost watch missed and that
/// still exists. A Job created and deleted while the watch was down would be missed; the flows
/// of these tests never delete Jobs except to abort steps, which none of them do.
#[derive(Clone)]
pub struct Ledger {
    jobs: Arc<Mutex<BTreeMap<String, SeenJob>>>,
}

fn key_of(j: &Job) -> (String, String, String, String, String) {
    let label = |k: &str| {
        j.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(k))
            .cloned()
            .unwrap_or_default()
    };
    let ann = |k: &str| crate::annotation(j, k);
    (
        label("ops.example.com/flow"),
        label("ops.example.com/run"),
        ann("ops.example.com/node-id"),
        ann("ops.example.com/instance"),
        ann("ops.example.com/attempt"),
    )
}

impl Ledger {
    /// Starts watching the Jobs of `ns` on the current runtime.
    pub async fn watch(client: &Client, ns: &str) -> Ledger {
        let ledger = Ledger {
            jobs: Arc::default(),
        };
        let api: Api<Job> = Api::namespaced(client.clone(), ns);
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let l = ledger.clone();
        tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) => l.record(&j),
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    _ => {}
                }
            }
        });
        ready_rx.await.expect("the Job watch started");
        ledger
    }

    fn record(&self, j: &Job) {
        let uid = j.metadata.uid.clone().unwrap_or_default();
        self.jobs
            .lock()
            .unwrap()
            .entry(uid.clone())
            .or_insert_with(|| SeenJob {
                name: j.metadata.name.clone().unwrap_or_default(),
                uid,
                key: key_of(j),
                seen_at: Instant::now(),
            });
    }

    /// Adds the Jobs that exist now (after an outage of the watch).
    pub async fn sweep(&self, client: &Client, ns: &str) {
        for j in Api::<Job>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            self.record(&j);
        }
    }

    /// Every Job seen.
    pub fn all(&self) -> Vec<SeenJob> {
        self.jobs.lock().unwrap().values().cloned().collect()
    }

    /// Jobs created more than once for one (flow, run, node, instance, attempt), or under one
    /// name: each such key with the names and uids seen.
    pub fn duplicates(&self) -> Vec<String> {
        let mut by_key: BTreeMap<_, Vec<&SeenJob>> = BTreeMap::new();
        let mut by_name: BTreeMap<&str, usize> = BTreeMap::new();
        let jobs = self.jobs.lock().unwrap();
        for j in jobs.values() {
            by_key.entry(j.key.clone()).or_default().push(j);
            *by_name.entry(&j.name).or_default() += 1;
        }
        let mut out: Vec<String> = by_key
            .into_iter()
            .filter(|(_, v)| v.len() > 1)
            .map(|(k, v)| {
                let seen: Vec<String> = v
                    .iter()
                    .map(|j| format!("{} ({})", j.name, j.uid))
                    .collect();
                format!("{k:?}: {}", seen.join(", "))
            })
            .collect();
        out.extend(
            by_name
                .into_iter()
                .filter(|(_, n)| *n > 1)
                .map(|(name, n)| format!("Job {name} created {n} times")),
        );
        out
    }

    /// When the first Job after `t` was seen, if one was.
    pub fn first_after(&self, t: Instant) -> Option<Instant> {
        self.jobs
            .lock()
            .unwrap()
            .values()
            .map(|j| j.seen_at)
            .filter(|s| *s > t)
            .min()
    }
}

/// A directory for files steps append to: on the machine running the test, which testenv's
/// step pods (local processes) see as is. (A real pod would need a hostPath for this; testenv's
/// `nsenter` shim runs the command without entering another mount namespace, so `execNode`
/// writes to the same paths.)
pub fn marker_dir(ns: &str) -> PathBuf {
    let d = env().dir().join("chaos").join(ns);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A shell command appending `line` to `file`.
pub fn append(file: &Path, line: &str) -> String {
    format!("echo {line} >> {}", file.display())
}

/// The lines of `file` ("" for none).
pub fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Panics unless `file` holds exactly `expected`, each line once (in any order).
pub fn assert_lines_once(file: &Path, expected: &[String], context: &str) {
    let mut got = lines(file);
    got.sort();
    let mut want = expected.to_vec();
    want.sort();
    assert_eq!(
        got,
        want,
        "{context}: every appending step must have run exactly once ({})",
        file.display()
    );
}

/// The Jobs of flow `flow` in `ns`.
pub async fn flow_jobs(client: &Client, ns: &str, flow: &str) -> Vec<Job> {
    Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("ops.example.com/flow={flow}")))
        .await
        .unwrap()
        .items
}

fn outcome(j: &Job) -> &'static str {
    let conds = j
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .cloned()
        .unwrap_or_default();
    let holds = |t: &str| conds.iter().any(|c| c.type_ == t && c.status == "True");
    // FailureTarget: failed, with pods still terminating (on a dead node: forever).
    if holds("Complete") {
        "Succeeded"
    } else if holds("Failed") || holds("FailureTarget") {
        "Failed"
    } else {
        "Running"
    }
}

/// Step types whose Job only opens them (their status entry is the whole step, body included):
/// these, and a node step's fan-out (`execNode-nodes`: its Job lists the nodes).
const OPENS_A_BODY: &[&str] = &["loopNodes", "if", "when", "include", "includeFlow"];

fn opens_a_body(step_type: &str) -> bool {
    OPENS_A_BODY.contains(&step_type) || step_type.ends_with("-nodes")
}

/// Checks that the final `status` of flow `flow` agrees with its Jobs: all of them belong to the
/// run status names; none is still running; for every step that ran in Jobs, the last attempt's
/// Job of each instance ended as the step's status says (one instance: its phase; several:
/// the instance counts), and a retried step's `attempt` is the number of its Jobs.
pub async fn assert_status_agrees_with_jobs(client: &Client, ns: &str, flow: &str, status: &Value) {
    let jobs = flow_jobs(client, ns, flow).await;
    let run = status["run"]["id"].as_str().unwrap_or_default();
    // node id -> instance -> (attempt, outcome) of its latest attempt; attempts per instance.
    let mut last: BTreeMap<String, BTreeMap<String, (u32, &'static str)>> = BTreeMap::new();
    let mut attempts: BTreeMap<(String, String), BTreeSet<u32>> = BTreeMap::new();
    for j in &jobs {
        let (_, job_run, node, instance, attempt) = key_of(j);
        let name = j.metadata.name.clone().unwrap_or_default();
        assert_eq!(
            job_run, run,
            "{flow}: Job {name} belongs to another run than status names"
        );
        let o = outcome(j);
        assert_ne!(
            o, "Running",
            "{flow}: Job {name} still runs after the flow ended"
        );
        let attempt: u32 = attempt.parse().unwrap_or(1);
        attempts
            .entry((node.clone(), instance.clone()))
            .or_default()
            .insert(attempt);
        let slot = last
            .entry(node)
            .or_default()
            .entry(instance)
            .or_insert((0, o));
        if attempt >= slot.0 {
            *slot = (attempt, o);
        }
    }
    let steps = status["steps"].as_array().cloned().unwrap_or_default();
    for (node, instances) in &last {
        let entry = steps
            .iter()
            .find(|s| s["id"] == node.as_str())
            .unwrap_or_else(|| {
                panic!("{flow}: no status.steps entry for Job node {node}: {status:#}")
            });
        let count = |o: &str| instances.values().filter(|(_, x)| *x == o).count() as u64;
        if let Some(counts) = entry.get("instances").filter(|c| !c.is_null()) {
            assert_eq!(
                (counts["succeeded"].as_u64(), counts["failed"].as_u64()),
                (Some(count("Succeeded")), Some(count("Failed"))),
                "{flow}: step {node}'s instance counts vs its Jobs {instances:?}: {entry:#}"
            );
        } else {
            assert_eq!(
                instances.len(),
                1,
                "{flow}: {node}: {instances:?} {entry:#}"
            );
            let (instance, (_, o)) = instances.iter().next().unwrap();
            if opens_a_body(entry["type"].as_str().unwrap_or_default()) {
                // Its Job only opened it (listed nodes, evaluated the condition, fetched); its
                // entry tells the whole step, body included: failed if that Job failed.
                if *o == "Failed" {
                    assert_eq!(entry["phase"], "Failed", "{flow}: step {node}: {entry:#}");
                }
            } else {
                assert_eq!(
                    entry["phase"].as_str(),
                    Some(*o),
                    "{flow}: step {node} vs its Job's outcome: {entry:#}"
                );
            }
            let tries = attempts[&(node.clone(), instance.clone())].len() as u64;
            let shown = entry["attempt"].as_u64().unwrap_or(1);
            assert_eq!(
                shown, tries,
                "{flow}: step {node} attempt vs its Jobs: {entry:#}"
            );
        }
    }
}

/// Polls `check` every 200 ms until it returns `Some`, tolerating errors (the API may be
/// restarting); panics naming `what` after `timeout`.
pub async fn poll<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The status of flow `name`, if it can be read now (None while the API is unreachable or the
/// flow is gone).
pub async fn status_of(client: &Client, ns: &str, name: &str) -> Option<Value> {
    crate::flows(client, ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .map(|f| f.data["status"].clone())
}

/// Whether a status is final.
pub fn is_final(status: &Value) -> bool {
    status["phase"] == "Succeeded" || status["phase"] == "Failed"
}
