//! The controller as its own process (the release `pseudoflow-controller` binary, as deployed),
//! so that its peak RSS (`VmHWM` in /proc/<pid>/status) is its own: what the scale sections
//! report.

use std::path::Path;
use std::process::Stdio;

use pseudoflow_testenv::TestEnv;
use tokio::process::Child;

use crate::common::{self, IMAGE};

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

/// Starts the release controller for namespace `ns`, its log in `dir/<log>`; it dies with the
/// bench, even when the bench is killed.
pub fn spawn_controller(env: &TestEnv, dir: &Path, ns: &str, log: &str) -> Child {
    let controller = common::sibling_binary(
        "pseudoflow-controller",
        "cargo build --release -p pseudoflow-controller --bin pseudoflow-controller",
    );
    let log = std::fs::File::create(dir.join(log)).unwrap();
    let mut cmd = tokio::process::Command::new(&controller);
    cmd.args(["--image", IMAGE, "--namespace", ns])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", env.kubeconfig_path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    pseudoflow_testenv::procs::own_group_and_die_with_parent(&mut cmd);
    cmd.spawn().unwrap()
}
