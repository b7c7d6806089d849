//! The controller the sections run: in this process (the sections that time a flow), or as its
//! own process (the release `pseudoflow-controller` binary, as deployed), so that its peak RSS
//! (`VmHWM` in /proc/<pid>/status) is its own: what the scale sections report, while they wait
//! for many objects at once.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{run_controller, Context};
use pseudoflow_testenv::TestEnv;
use tokio::process::Child;
use tokio::task::JoinHandle;

use crate::common::{self, JobCounter, IMAGE};

/// The controller in this process for namespace `ns`, its executor pods from `image`; node
/// steps are allowed in `ns` when `node_steps`. Abort the handle to stop it.
pub fn in_process(client: &Client, image: &str, ns: &str, node_steps: bool) -> JoinHandle<()> {
    let mut ctx = Context::new(client.clone(), image.into(), Arc::new(Metrics::default()));
    if node_steps {
        ctx = ctx.with_node_step_namespaces([ns.to_string()].into_iter().collect());
    }
    tokio::spawn(run_controller(Arc::new(ctx), Some(ns.to_string())))
}

/// `VmHWM` (peak resident set) of a process, in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// CPU seconds (user and system) process `pid` has used so far, from /proc/<pid>/stat.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Field n is rest's index n - 3; the kernel's clock ticks are 100 a second on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

/// The release controller running as its own process.
pub struct ControllerProcess {
    child: Child,
    pid: u32,
    log: PathBuf,
}

impl ControllerProcess {
    /// Starts the release controller for namespace `ns`, its log in `dir/<log>`; it dies with
    /// the bench, even when the bench is killed.
    pub fn spawn(env: &TestEnv, dir: &Path, ns: &str, log: &str) -> ControllerProcess {
        let controller = common::sibling_binary(
            "pseudoflow-controller",
            "cargo build --release -p pseudoflow-controller --bin pseudoflow-controller",
        );
        let log = dir.join(log);
        let file = std::fs::File::create(&log).unwrap();
        let mut cmd = tokio::process::Command::new(&controller);
        cmd.args(["--image", IMAGE, "--namespace", ns])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .env("KUBECONFIG", env.kubeconfig_path())
            .env(
                "RUST_LOG",
                std::env::var("PSEUDOFLOW_BENCH_CONTROLLER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .kill_on_drop(true);
        pseudoflow_testenv::procs::own_group_and_die_with_parent(&mut cmd);
        let child = cmd.spawn().unwrap();
        let pid = child.id().unwrap();
        ControllerProcess { child, pid, log }
    }

    /// Its peak resident set so far, in KiB (0 once it is gone).
    pub fn peak_kib(&self) -> u64 {
        peak_rss_kib(self.pid).unwrap_or(0)
    }

    /// The CPU seconds it has used so far.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid)
    }

    /// Polls `count` (how many of `total` are done, and how many failed) once a second — a LIST
    /// of everything is not free for the API server — until all are done or failed, or
    /// `timeout` has passed since `t`; says how far it got every 30 s, and panics if the
    /// controller exits meanwhile. Returns the last (done, failed).
    pub async fn await_all<F, Fut>(
        &mut self,
        section: &str,
        total: usize,
        (t, timeout): (Instant, Duration),
        counter: &JobCounter,
        mut count: F,
    ) -> (usize, usize)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = (usize, usize)>,
    {
        let (mut done, mut failed) = (0, 0);
        let mut last_print = Instant::now();
        while t.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the controller exited ({status}); log: {}",
                    self.log.display()
                );
            }
            (done, failed) = count().await;
            if done + failed == total {
                break;
            }
            if last_print.elapsed() > Duration::from_secs(30) {
                println!(
                    "{section}: {done}/{total} done after {:.0} s, {} Jobs so far, controller VmHWM {} MiB",
                    t.elapsed().as_secs_f64(),
                    counter.total(),
                    self.peak_kib() / 1024
                );
                last_print = Instant::now();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        (done, failed)
    }

    /// Stops it.
    pub async fn kill(mut self) {
        self.child.kill().await.ok();
    }
}
