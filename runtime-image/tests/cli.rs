//! Runs the real `pseudoflow-step` binary as a local process, the way the testenv kubelet does:
//! input file, `PSEUDOFLOW_HOST_ROOT`, `PSEUDOFLOW_TERMINATION_LOG`, no cluster. Covers the
//! exit codes, node steps, variables, timeouts and the oversized-result path.

use std::path::Path;
use std::process::Command;

use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::protocol::{ExecutorInput, FlowRef, Task};
use serde_json::{json, Value};

struct Run {
    code: i32,
    result: StepResult,
    stderr: String,
}

fn input(task: Task, step: Value, target: Option<&str>, timeout: Option<u32>) -> ExecutorInput {
    ExecutorInput {
        flow: FlowRef {
            name: "f".into(),
            namespace: "ops".into(),
            uid: "u".into(),
            service_account: "runner".into(),
        },
        run_id: "run-1".into(),
        node_id: "n".into(),
        path: "spec.steps[0]".into(),
        instance: vec![],
        attempt: 0,
        task,
        step,
        target_node: target.map(str::to_string),
        timeout_seconds: timeout,
        artifacts: vec![],
        segment: vec![],
        changed_before: false,
        journal_key: None,
        result_key: None,
    }
}

fn run_raw(dir: &Path, input_text: &str) -> Run {
    let input_file = dir.join("input.json");
    let log = dir.join("termination-log");
    std::fs::write(&input_file, input_text).unwrap();
    // The node's `/`, as mounted in a node step's pod (the executor does not create it).
    std::fs::create_dir_all(dir.join("host")).unwrap();
    let _ = std::fs::remove_file(&log);
    let out = Command::new(env!("CARGO_BIN_EXE_pseudoflow-step"))
        .args(["run", "--input"])
        .arg(&input_file)
        .env("PSEUDOFLOW_HOST_ROOT", dir.join("host"))
        .env("PSEUDOFLOW_TERMINATION_LOG", &log)
        .env("PSEUDOFLOW_NSENTER", "")
        .env("PSEUDOFLOW_JOB_NAME", "f-job")
        .env("KUBECONFIG", dir.join("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&log).expect("termination log written");
    Run {
        code: out.status.code().unwrap(),
        result: serde_json::from_str(&text).unwrap(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn run(dir: &Path, i: &ExecutorInput) -> Run {
    run_raw(dir, &serde_json::to_string(i).unwrap())
}

#[test]
fn config_file_writes_once_then_reports_no_change() {
    let dir = tempfile::tempdir().unwrap();
    let step = json!({"type": "configFile", "path": "/etc/nodelocal/dns.conf",
                      "content": "server=169.254.20.10\n", "mode": "0600", "owner": "0:0"});
    let i = input(Task::Run, step, Some("w1"), None);
    let first = run(dir.path(), &i);
    assert_eq!(first.code, 0, "{:?} {}", first.result, first.stderr);
    assert!(first.result.changed);
    let file = dir.path().join("host/etc/nodelocal/dns.conf");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "server=169.254.20.10\n"
    );
    let second = run(dir.path(), &i);
    assert_eq!(second.code, 0);
    assert!(!second.result.changed, "{:?}", second.result);
}

#[test]
fn exec_node_sets_var_and_var_per_node() {
    let dir = tempfile::tempdir().unwrap();
    let step = json!({"type": "execNode", "cmd": "echo hello", "var": "v", "varPerNode": "per"});
    let r = run(dir.path(), &input(Task::Run, step, Some("w1"), None));
    assert_eq!(r.code, 0, "{:?}", r.result);
    assert_eq!(r.result.vars["v"], json!("hello"));
    assert_eq!(r.result.vars["per"], json!({"w1": "hello"}));
}

#[test]
fn failing_commands_exit_1_with_stderr_in_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let step = json!({"type": "exec", "cmd": "echo nope >&2; exit 4"});
    let r = run(dir.path(), &input(Task::Run, step, None, None));
    assert_eq!(r.code, 1);
    assert!(!r.result.ok);
    assert_eq!(r.result.message, "command failed with exit code 4: nope");
}

#[test]
fn scripts_time_out_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let step = json!({"type": "script", "code": "sleep 30"});
    let started = std::time::Instant::now();
    let r = run(dir.path(), &input(Task::Run, step, None, Some(1)));
    assert_eq!(r.code, 1);
    assert!(
        r.result.message.starts_with("timed out after 1s"),
        "{}",
        r.result.message
    );
    assert!(started.elapsed().as_secs() < 10);
}

#[test]
fn bad_input_exits_2_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_raw(dir.path(), "{\"not\": \"an input\"}");
    assert_eq!(r.code, 2);
    assert!(
        r.result.message.starts_with("invalid input"),
        "{}",
        r.result.message
    );
    let step = json!({"type": "log", "message": "x"});
    let r = run(dir.path(), &input(Task::Run, step, None, None));
    assert_eq!(r.code, 2, "{:?}", r.result);
    let step = json!({"type": "configFile", "path": "/x", "content": ""});
    let r = run(dir.path(), &input(Task::Run, step, None, None));
    assert_eq!(r.code, 2, "a node step without targetNode: {:?}", r.result);
}

#[test]
fn oversized_results_without_a_cluster_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let step =
        json!({"type": "exec", "cmd": "head -c 300000 /dev/zero | tr '\\0' x", "var": "big"});
    let r = run(dir.path(), &input(Task::Run, step, None, None));
    assert!(
        r.result
            .message
            .contains("too large for the termination message"),
        "{}",
        r.result.message
    );
    assert!(
        r.result.message.contains("f-job-result"),
        "{}",
        r.result.message
    );
    assert_eq!(
        r.code, 1,
        "a result the controller cannot read is a failure"
    );
}

#[test]
fn logs_are_json_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let step = json!({"type": "exec", "cmd": "true"});
    let r = run(dir.path(), &input(Task::Run, step, None, None));
    let first = r.stderr.lines().next().unwrap();
    let v: Value = serde_json::from_str(first).unwrap();
    assert_eq!(v["fields"]["message"], "starting");
}

/// A fused segment of node steps (configFile → execNode onlyIfChanged → execNode with its own
/// timeout) as the controller sends it for one node.
fn node_segment(dir: &Path, last_timeout: u32) -> ExecutorInput {
    use pseudoflow_crd::protocol::SegmentStep;
    let ran = dir.join("ran.log");
    let member = |id: &str, step: Value, timeout: Option<u32>| SegmentStep {
        node_id: id.into(),
        path: format!("spec.steps[0].steps[{}]", &id[id.len() - 1..]),
        step,
        timeout_seconds: timeout,
        continue_on_error: false,
        error: None,
        outcome: None,
    };
    let config = json!({"type": "configFile", "path": "/etc/x.conf", "content": "x=1\n"});
    let mut i = input(Task::Run, config.clone(), Some("w1"), None);
    i.instance = vec!["w1".into()];
    i.segment = vec![
        member("s0-s0", config, None),
        member(
            "s0-s1",
            json!({"type": "execNode", "onlyIfChanged": true, "cmd": format!("echo restarted >> {}", ran.display())}),
            None,
        ),
        member(
            "s0-s2",
            json!({"type": "execNode", "cmd": "sleep 3"}),
            Some(last_timeout),
        ),
    ];
    i
}

#[test]
fn a_segment_runs_its_steps_in_order_with_only_if_changed_and_each_steps_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran.log");
    let first = run(dir.path(), &node_segment(dir.path(), 10));
    assert_eq!(first.code, 0, "{:?} {}", first.result, first.stderr);
    let ids: Vec<&str> = first
        .result
        .segment
        .iter()
        .map(|m| m.node_id.as_str())
        .collect();
    assert_eq!(ids, ["s0-s0", "s0-s1", "s0-s2"]);
    assert!(
        first.result.segment[0].result.changed,
        "the file was written"
    );
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "restarted\n");
    assert!(first.result.segment[2].finished_ms - first.result.segment[2].started_ms >= 3000);

    // Nothing changed on the node this time: the onlyIfChanged step is skipped, in the segment.
    let second = run(dir.path(), &node_segment(dir.path(), 10));
    assert_eq!(second.code, 0, "{:?}", second.result);
    assert!(!second.result.segment[0].result.changed);
    assert_eq!(
        second.result.segment[1].result.message,
        "skipped: nothing changed on this node"
    );
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "restarted\n");

    // A step's own timeout fails that step, and the segment with it (exit 1: the Job fails).
    let third = run(dir.path(), &node_segment(dir.path(), 1));
    assert_eq!(third.code, 1, "{:?}", third.result);
    let last = &third.result.segment[2].result;
    assert!(
        !last.ok && last.message.starts_with("timed out after 1s"),
        "{last:?}"
    );
    assert!(
        third.result.message.contains("step 3 of 3 (s0-s2) failed"),
        "{}",
        third.result.message
    );
}
