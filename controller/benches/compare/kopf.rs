//! Section `kopf`: a flow bound to a kind against the kopf operator it replaces
//! (bench/kopf/operator.py, kopf 1.45 in its own venv from bench/setup-kopf.sh), side by side on
//! one cluster, doing the same work per object: a ConfigMap named after it holding `spec.size`,
//! then a Ready condition. Each driver gets a fresh namespace and runs as its own process (the
//! release `pseudoflow-controller`; `kopf run` on the host, as the seeds' operators ran), so its
//! peak RSS is its own. Reported per driver: one object create → Ready (median of 5 after a
//! warm-up, timed by a watch), then each count of objects created at once → all Ready. The
//! bound flow runs three times: as a new user writes it (no `record`, which resolves to
//! `Object` for this flow: no child flow or run state per object, the result recorded only in
//! the object, as kopf records it; every Event); with a child flow per object
//! (`bind.record: Child`) and `options.events: Warnings`, which publishes nothing on success —
//! as this kopf operator, whose Event posting is off; and recorded in the object with
//! `Warnings`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::Client;
use pseudoflow_test_support::{FlowNamespace, TestKind};
use pseudoflow_testenv::{apply, TestEnv};
use serde_json::json;
use tokio::process::Child;

use crate::api_load::{self, Requests};
use crate::common::{self, Row};
use crate::process::{peak_rss_kib, ControllerProcess};

use crate::bound::{bound_flow, ready, GROUP};

/// Who serves the Gadgets, in the order they are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    /// The bound flow as a new user writes it (`record` unset: `Object` for it): an Event per
    /// step start and end, and per run.
    Flow,
    /// The same flow with a child per object (`record: Child`) and `options.events: Warnings`.
    QuietFlow,
    /// The same flow with `options.events: Warnings` and `bind.record: Object`.
    ObjectFlow,
    /// bench/kopf/operator.py.
    Kopf,
}

impl Driver {
    const ALL: [Driver; 4] = [
        Driver::Flow,
        Driver::QuietFlow,
        Driver::ObjectFlow,
        Driver::Kopf,
    ];

    fn name(self) -> &'static str {
        match self {
            Driver::Flow => {
                "PseudoFlow bound flow as written (release `pseudoflow-controller` process; \
                 `record` unset, so `Object`)"
            }
            Driver::QuietFlow => {
                "PseudoFlow bound flow, `record: Child`, `options.events: Warnings` (no Event \
                 on success)"
            }
            Driver::ObjectFlow => {
                "PseudoFlow bound flow, `events: Warnings`, `bind.record: Object` (no child flow)"
            }
            Driver::Kopf => "kopf 1.45.2 operator (Python, `kopf run` on the host; posting off)",
        }
    }

    /// How a kopf row names this flow's ratio (None: the flow as written, the row's own ratio).
    fn ratio_label(self) -> Option<&'static str> {
        match self {
            Driver::QuietFlow => Some("`record: Child`, `events: Warnings` flow"),
            Driver::ObjectFlow => Some("`record: Object` flow"),
            Driver::Flow | Driver::Kopf => None,
        }
    }

    fn namespace_prefix(self) -> &'static str {
        match self {
            Driver::Flow => "vskopf",
            Driver::QuietFlow => "quiet",
            Driver::ObjectFlow => "inobj",
            Driver::Kopf => "kopf",
        }
    }
}

/// One of the operators, running (also the seed section's, `seed_kopf.rs`).
pub enum Operator {
    Flow(ControllerProcess),
    Kopf(Child, u32),
}

impl Operator {
    pub fn peak_kib(&self) -> u64 {
        match self {
            Operator::Flow(p) => p.peak_kib(),
            Operator::Kopf(_, pid) => peak_rss_kib(*pid).unwrap_or(0),
        }
    }

    pub fn cpu_seconds(&self) -> f64 {
        match self {
            Operator::Flow(p) => p.cpu_seconds(),
            Operator::Kopf(_, pid) => crate::process::cpu_seconds(*pid),
        }
    }

    pub async fn stop(self) {
        match self {
            Operator::Flow(p) => p.kill().await,
            Operator::Kopf(mut c, _) => drop(c.kill().await),
        }
    }
}

fn kopf_binary() -> PathBuf {
    let venv = std::env::var("PSEUDOFLOW_KOPF_VENV").unwrap_or_else(|_| {
        let cache = std::env::var("XDG_CACHE_HOME")
            .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap()));
        format!("{cache}/pseudoflow/kopf-venv")
    });
    let kopf = PathBuf::from(venv).join("bin/kopf");
    assert!(
        kopf.is_file(),
        "{} missing: run bash bench/setup-kopf.sh",
        kopf.display()
    );
    kopf
}

async fn start(env: &TestEnv, client: &Client, dir: &Path, ns: &str, driver: Driver) -> Operator {
    if driver != Driver::Kopf {
        let p = ControllerProcess::spawn(env, dir, ns, &format!("{ns}-controller.log"));
        let mut flow = bound_flow(ns);
        if driver != Driver::Flow {
            flow["spec"]["options"] = json!({"events": "Warnings"});
        }
        if driver == Driver::QuietFlow {
            flow["spec"]["bind"]["record"] = json!("Child");
        }
        if driver == Driver::ObjectFlow {
            flow["spec"]["bind"]["record"] = json!("Object");
        }
        apply::apply_value(client, flow, None).await.unwrap();
        return Operator::Flow(p);
    }
    spawn_kopf(env, dir, ns, "operator.py", &[])
}

/// `kopf run --standalone --namespace <ns> <extra> bench/kopf/<script>` on the host, its log in
/// `dir/<ns>-kopf.log`; it dies with the bench.
pub fn spawn_kopf(env: &TestEnv, dir: &Path, ns: &str, script: &str, extra: &[&str]) -> Operator {
    let operator = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../bench/kopf")
        .join(script);
    let log = std::fs::File::create(dir.join(format!("{ns}-kopf.log"))).unwrap();
    let mut cmd = tokio::process::Command::new(kopf_binary());
    cmd.args(["run", "--standalone", "--namespace", ns])
        .args(extra)
        .arg(operator)
        .env("KUBECONFIG", env.kubeconfig_path())
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    pseudoflow_testenv::procs::own_group_and_die_with_parent(&mut cmd);
    let child = cmd.spawn().unwrap();
    let pid = child.id().unwrap();
    Operator::Kopf(child, pid)
}

/// Waits (by watching) until every object named in `names` is Ready; returns whether it
/// happened within `timeout`.
async fn all_ready(api: &Api<DynamicObject>, names: &HashSet<String>, timeout: Duration) -> bool {
    ready_after(api, names, timeout, async {}).await.0
}

/// Opens a watch on the kind, runs `create` once the watch has listed what is there, and waits
/// until every object named in `names` is Ready: whether it happened within `timeout`, and
/// how long after `create` started. The watch is open before the objects exist, as an
/// informer's is, so what is timed is the operator's work. A watch opened after the create
/// would start with a list, and a list from the API server's cache waits until that cache
/// is known to be as new as the newest write of any kind (a consistent read, Kubernetes
/// 1.31+): when an operator's Event was that newest write, the list waited for the cache's
/// next progress notice, up to ~60 ms, whichever operator was timed.
async fn ready_after<F: std::future::Future>(
    api: &Api<DynamicObject>,
    names: &HashSet<String>,
    timeout: Duration,
    create: F,
) -> (bool, Duration) {
    let stream = watcher::watcher(api.clone(), watcher::Config::default());
    futures::pin_mut!(stream);
    let mut seen = HashSet::new();
    let note = |o: &DynamicObject, seen: &mut HashSet<String>| {
        let name = o.metadata.name.clone().unwrap_or_default();
        if ready(o) && names.contains(&name) {
            seen.insert(name);
        }
    };
    let listed = async {
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::InitApply(o)) => note(&o, &mut seen),
                Ok(Event::InitDone) => return,
                _ => {}
            }
        }
    };
    assert!(
        tokio::time::timeout(timeout, listed).await.is_ok(),
        "the watch did not list the kind within {timeout:?}"
    );
    let t = Instant::now();
    create.await;
    let wait = async {
        while seen.len() < names.len() {
            match stream.next().await {
                Some(Ok(Event::Apply(o) | Event::InitApply(o))) => note(&o, &mut seen),
                Some(_) => {}
                None => return,
            }
        }
    };
    let done = tokio::time::timeout(timeout, wait).await.is_ok();
    (done && seen.len() == names.len(), t.elapsed())
}

/// The two drivers' rows for one cluster: latency, then each count at once.
pub async fn run(
    env: &TestEnv,
    client: &Client,
    dir: &Path,
    counts: &[usize],
    timeout: Duration,
    title: &str,
) -> Vec<Row> {
    let gadgets = TestKind::new(GROUP, "Gadget");
    let mut rows = Vec::new();
    let mut flow_figures = Vec::new();
    let mut others: Vec<(&str, Vec<Duration>)> = Vec::new();
    for which in Driver::ALL {
        let driver = which.name();
        let kopf = which == Driver::Kopf;
        let mut rules = gadgets.bound_rules();
        rules.as_array_mut().unwrap().push(
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}),
        );
        let ns = FlowNamespace::new(which.namespace_prefix())
            .rules(rules)
            .create(env, client)
            .await;
        let api = gadgets.install(client, &ns).await;
        api_load::settle(client).await;
        let op = start(env, client, dir, &ns, which).await;
        // Warm-up: the operator is up and serving.
        let one = |name: String| HashSet::from([name]);
        apply::apply_value(
            client,
            gadgets.object(&ns, "warm", json!({"size": "1Gi"})),
            None,
        )
        .await
        .unwrap();
        assert!(
            all_ready(&api, &one("warm".into()), Duration::from_secs(120)).await,
            "{driver}: warm-up object not Ready in 120 s (logs in {})",
            dir.display()
        );
        let mut latencies = Vec::new();
        for i in 0..5 {
            let name = format!("one-{i}");
            let object = gadgets.object(&ns, &name, json!({"size": "1Gi"}));
            let create = async { apply::apply_value(client, object, None).await.unwrap() };
            let (done, took) = ready_after(&api, &one(name), Duration::from_secs(60), create).await;
            assert!(done, "{driver}: one-{i} not Ready in 60 s");
            latencies.push(took);
        }
        let median = common::median(&latencies);
        let mut figures = vec![median];
        let against: &[Duration] = if kopf { &flow_figures } else { &[] };
        rows.push(row(
            format!("{title}: one object create → Ready"),
            driver,
            millis(&latencies, median),
            against,
            0,
            median,
            other_ratios(kopf, &others, 0, median)
                .trim_start_matches("; ")
                .to_string(),
        ));
        for &n in counts {
            let names: HashSet<String> = (0..n).map(|i| format!("n{n}-{i}")).collect();
            api_load::settle(client).await;
            let before = Requests::now(client).await;
            let cpu_before = op.cpu_seconds();
            let profile = api_load::profile_if_asked(client);
            let objects = names
                .iter()
                .map(|name| gadgets.object(&ns, name, json!({"size": "1Gi"})));
            let create = common::apply_all(client, objects);
            let (done, took) = ready_after(&api, &names, timeout, create).await;
            let requests = before.until(&Requests::now(client).await);
            let cpu = op.cpu_seconds() - cpu_before;
            requests.save(&dir.join(format!("{ns}-requests-{n}.txt")), n);
            api_load::save_profile(profile, &dir.join(format!("{ns}-apiserver-{n}.pprof"))).await;
            figures.push(took);
            let wall = if done {
                common::secs(took)
            } else {
                format!("not done after {}", common::secs(took))
            };
            rows.push(row(
                format!("{title}: {n} objects created at once → all Ready"),
                driver,
                wall,
                against,
                figures.len() - 1,
                took,
                format!(
                    "peak RSS (VmHWM) so far {:.1} MiB; {}; CPU {:.1} s ({driver}) and {:.1} s (kube-apiserver){}",
                    op.peak_kib() as f64 / 1024.0,
                    requests.per_object(n),
                    cpu,
                    requests.apiserver_cpu(),
                    other_ratios(kopf, &others, figures.len() - 1, took),
                ),
            ));
        }
        match (which, which.ratio_label()) {
            (Driver::Flow, _) => flow_figures = figures,
            (_, Some(label)) => others.push((label, figures)),
            _ => {}
        }
        op.stop().await;
        common::print_partial(&rows);
    }
    rows
}

/// For a kopf row, each other flow's figure `i` ÷ kopf's (`took`): the `events: Warnings`
/// flows' are the like-for-like ratios, since this kopf posts no Events.
fn other_ratios(kopf: bool, others: &[(&str, Vec<Duration>)], i: usize, took: Duration) -> String {
    if !kopf {
        return String::new();
    }
    let mut out = String::new();
    for (label, figures) in others {
        if let Some(f) = figures.get(i) {
            out.push_str(&format!("; {label} ÷ kopf {}", common::ratio(*f, took)));
        }
    }
    out
}

/// A latency to the millisecond: the median (min, max) of `all`.
fn millis(all: &[Duration], median: Duration) -> String {
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let min = all.iter().map(ms).fold(f64::MAX, f64::min);
    let max = all.iter().map(ms).fold(0.0, f64::max);
    format!(
        "{:.0} ms (min {min:.0}, max {max:.0}, {} runs)",
        ms(&median),
        all.len()
    )
}

/// A row; for kopf, the ratio of the flow's figure `i` to kopf's (`took`).
pub fn row(
    workload: String,
    driver: &str,
    wall: String,
    flow_figures: &[Duration],
    i: usize,
    took: Duration,
    notes: String,
) -> Row {
    let ratio = match flow_figures.get(i) {
        Some(flow) => common::ratio(*flow, took),
        None => "1.00×".into(),
    };
    Row {
        workload,
        driver: driver.into(),
        wall,
        jobs: "-".into(),
        ratio,
        notes,
    }
}
