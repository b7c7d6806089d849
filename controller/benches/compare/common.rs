//! What the sections share: the executor image, counting the Jobs a flow made (by watching, so
//! Jobs a TTL or GC removes still count), waiting for a flow, medians and the result table.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::Client;
use pseudoflow_controller::flow::flow_resource;
use serde_json::Value;

/// The executor image; testenv runs it as the release `pseudoflow-step` binary.
pub const IMAGE: &str = "pseudoflow/runtime:bench";

/// Applies `docs` 32 at a time, as a client creating many at once would; returns how long
/// that took.
pub async fn apply_all(client: &Client, docs: impl Iterator<Item = Value>) -> Duration {
    let t = Instant::now();
    futures::stream::iter(docs)
        .map(|doc| async move {
            pseudoflow_testenv::apply::apply_value(client, doc, None)
                .await
                .unwrap();
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    t.elapsed()
}

/// `name`'s value as a number, or `default` when unset.
pub fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: expected a number")),
        Err(_) => default,
    }
}

/// A binary next to this bench's target profile directory (`target/release/<name>`).
pub fn sibling_binary(name: &str, how: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join(name);
    assert!(
        p.is_file(),
        "{} missing; build it first: {how}",
        p.display()
    );
    p
}

/// `kubectl` as built by testenv/build-k8s.sh.
pub fn kubectl() -> PathBuf {
    pseudoflow_testenv::binaries::binary("kubectl").unwrap()
}

/// The Jobs created in one namespace, by UID, with the name of the flow owning each (empty when
/// no PseudoFlow owns it). Counted from a watch, so a Job is counted even if removed later.
#[derive(Clone)]
pub struct JobCounter {
    seen: Arc<Mutex<HashMap<String, String>>>,
    synced: Arc<std::sync::atomic::AtomicBool>,
}

impl JobCounter {
    /// Starts watching `ns` and waits until the initial list is in.
    pub async fn start(client: &Client, ns: &str) -> JobCounter {
        let c = JobCounter {
            seen: Arc::default(),
            synced: Arc::default(),
        };
        let (seen, synced) = (c.seen.clone(), c.synced.clone());
        let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
        tokio::spawn(async move {
            let mut stream = watcher::watcher(jobs, watcher::Config::default()).boxed();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(Event::Apply(j) | Event::InitApply(j)) => {
                        let owner = j
                            .metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .find(|o| o.kind == "PseudoFlow")
                            .map(|o| o.name.clone())
                            .unwrap_or_default();
                        let uid = j.metadata.uid.clone().unwrap_or_default();
                        seen.lock().unwrap().entry(uid).or_insert(owner);
                    }
                    Ok(Event::InitDone) => synced.store(true, std::sync::atomic::Ordering::SeqCst),
                    _ => {}
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while !c.synced.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "Job watch in {ns} not synced");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        c
    }

    /// Jobs owned by the flow `flow`.
    pub fn of_flow(&self, flow: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .values()
            .filter(|o| *o == flow)
            .count()
    }

    /// Jobs owned by any flow whose name `pred` accepts.
    pub fn of_flows(&self, pred: impl Fn(&str) -> bool) -> usize {
        self.seen
            .lock()
            .unwrap()
            .values()
            .filter(|o| !o.is_empty() && pred(o))
            .count()
    }

    /// Every Job seen, whoever made it.
    pub fn total(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// Polls the flow every 50 ms until its phase is final; panics on Failed or after `secs`.
pub async fn wait_succeeded(client: &Client, ns: &str, name: &str, secs: u64) -> Value {
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &flow_resource());
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(f) = flows.get_opt(name).await.unwrap() {
            match f.data["status"]["phase"].as_str() {
                Some("Succeeded") => return f.data["status"].clone(),
                Some("Failed") => panic!("flow {ns}/{name} Failed: {:#}", f.data["status"]),
                _ => {}
            }
        }
        assert!(
            Instant::now() < deadline,
            "flow {ns}/{name} not done in {secs}s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The median of the measurements (the lower middle one for an even count).
pub fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[(v.len() - 1) / 2]
}

/// Seconds with one decimal.
pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The measurements, as `median (min–max, n runs)` or just the value for one run.
pub fn spread(v: &[Duration]) -> String {
    if v.len() == 1 {
        return secs(v[0]);
    }
    let min = v.iter().min().unwrap();
    let max = v.iter().max().unwrap();
    format!(
        "{} (min {:.1}, max {:.1}, {} runs)",
        secs(median(v)),
        min.as_secs_f64(),
        max.as_secs_f64(),
        v.len()
    )
}

/// `a / b` as a ratio.
pub fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64())
}

/// One line of the result table.
pub struct Row {
    /// Which benchmark (the numbering) and its workload.
    pub workload: String,
    /// Who did the work.
    pub driver: String,
    /// Wall time, as measured.
    pub wall: String,
    /// Jobs created ("0" for drivers that make none).
    pub jobs: String,
    /// PseudoFlow's wall time over this driver's (below 1: PseudoFlow is faster).
    pub ratio: String,
    /// Anything else measured (peak RSS, checks done).
    pub notes: String,
}

/// The rows so far, on stderr, so that a run stopped early still shows what it measured.
pub fn print_partial(rows: &[Row]) {
    eprintln!("rows so far:");
    for r in rows {
        eprintln!(
            "  | {} | {} | {} | {} | {} | {} |",
            r.workload, r.driver, r.wall, r.jobs, r.ratio, r.notes
        );
    }
}

/// Prints the table in markdown, stable column order, for pasting into README.
pub fn print_table(header: &str, rows: &[Row]) {
    println!("\n{header}\n");
    println!("| benchmark | driver | wall time (median) | Jobs | PseudoFlow ÷ driver | notes |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            r.workload, r.driver, r.wall, r.jobs, r.ratio, r.notes
        );
    }
    println!();
}
