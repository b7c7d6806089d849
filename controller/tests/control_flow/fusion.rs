//! Step fusion end to end on testenv (docs/decisions.md#step-fusion): consecutive API steps run
//! in one Job, and nothing a user sees per step changes — a status entry, Events and outputs per
//! step, `continueOnError`, a failure stopping what follows, progress while the Job runs — and a
//! pod that dies mid-segment is replaced by one that resumes after the steps already done.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::api::wait_step_running;
use crate::common::{apply, create_flow, flow_events, jobs, setup, step, wait_done};

fn cm_rule() -> Value {
    json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]})
}

fn apply_cm(name: &str, data: Value) -> Value {
    json!({"type": "apply", "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}]})
}

async fn cm_data(client: &Client, ns: &str, name: &str) -> Option<Value> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .map(|c| json!(c.data.unwrap_or_default()))
}

fn message(v: &Value) -> &str {
    v["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_apply_steps_share_one_job_and_each_keeps_its_status_entry_and_events() {
    let (client, ns, ctl) = setup("fuse50", json!([cm_rule()]), json!([])).await;
    let steps: Vec<Value> = (0..50)
        .map(|i| apply_cm(&format!("cm-{i}"), json!({"i": i.to_string()})))
        .collect();
    create_flow(
        &client,
        &ns,
        "fifty",
        json!({"serviceAccountName": "flow", "steps": steps}),
    )
    .await;
    let status = wait_done(&client, &ns, "fifty", 180).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let all = jobs(&client, &ns).await;
    assert_eq!(all.len(), 1, "one Job for the 50 steps, got {}", all.len());
    for i in 0..50 {
        let s = step(&status, &format!("spec.steps[{i}]"));
        assert_eq!(s["phase"], "Succeeded", "{s:#}");
        assert_eq!(s["changed"], true, "{s:#}");
        assert!(
            message(s).contains(&format!("ConfigMap/{ns}/cm-{i}")),
            "{s:#}"
        );
        let data = cm_data(&client, &ns, &format!("cm-{i}")).await;
        assert_eq!(data, Some(json!({"i": i.to_string()})));
    }
    let events = flow_events(&client, &ns, "fifty").await;
    let succeeded = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("StepSucceeded"))
        .count();
    assert_eq!(succeeded, 50, "one StepSucceeded Event per step");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_reading_an_output_of_the_segment_starts_a_new_job_and_sees_the_value() {
    let (client, ns, ctl) = setup("fusevar", json!([cm_rule()]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "outputs",
        json!({
            "serviceAccountName": "flow",
            "steps": [
                apply_cm("first", json!({})),
                {"type": "exec", "cmd": "echo from-exec", "var": "said"},
                // Reads `said`: cannot be prepared before the exec ran, so a Job of its own.
                apply_cm("second", json!({"said": "${said}"})),
                apply_cm("third", json!({"also": "${said}"})),
            ]
        }),
    )
    .await;
    let status = wait_done(&client, &ns, "outputs", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(
        cm_data(&client, &ns, "second").await,
        Some(json!({"said": "from-exec"}))
    );
    assert_eq!(
        cm_data(&client, &ns, "third").await,
        Some(json!({"also": "from-exec"}))
    );
    assert_eq!(
        jobs(&client, &ns).await.len(),
        2,
        "steps 0-1 share a Job, steps 2-3 another"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_on_error_goes_on_inside_a_segment_and_a_failure_stops_it() {
    let (client, ns, ctl) = setup("fusefail", json!([cm_rule()]), json!([])).await;
    // The flow's identity may not touch Secrets: those steps fail in the Job.
    let secret =
        |name: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}});
    create_flow(
        &client,
        &ns,
        "failing",
        json!({
            "serviceAccountName": "flow",
            "steps": [
                apply_cm("before", json!({})),
                {"type": "apply", "manifests": [secret("tolerated")], "continueOnError": true},
                apply_cm("between", json!({})),
                {"type": "apply", "manifests": [secret("fatal")]},
                apply_cm("never", json!({})),
            ]
        }),
    )
    .await;
    let status = wait_done(&client, &ns, "failing", 120).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(jobs(&client, &ns).await.len(), 1, "{status:#}");
    let phase = |i: usize| step(&status, &format!("spec.steps[{i}]"))["phase"].clone();
    assert_eq!(phase(0), "Succeeded");
    assert_eq!(phase(1), "Failed");
    assert!(
        message(step(&status, "spec.steps[1]")).contains("forbidden"),
        "{status:#}"
    );
    assert_eq!(
        phase(2),
        "Succeeded",
        "continueOnError: the segment went on"
    );
    assert_eq!(phase(3), "Failed");
    let reached: Vec<&Value> = status["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["path"] == "spec.steps[4]")
        .collect();
    assert!(reached.is_empty(), "step 4 never started: {reached:?}");
    assert!(cm_data(&client, &ns, "between").await.is_some());
    assert!(
        cm_data(&client, &ns, "never").await.is_none(),
        "a failure without continueOnError stops the segment"
    );
    assert!(
        message(&status).contains("spec.steps[3]"),
        "the run's failure names the step: {status:#}"
    );
    ctl.abort();
}

/// The executor processes of Job `job`'s pods (testenv runs containers as local processes):
/// found by the Job name the pod's environment carries.
fn executor_pids(job: &str) -> Vec<i32> {
    let want = format!("PSEUDOFLOW_JOB_NAME={job}");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let exe = std::fs::read_link(entry.path().join("exe")).unwrap_or_default();
        if !exe.to_string_lossy().contains("pseudoflow-step") {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_shows_inside_a_running_segment_and_a_killed_pod_resumes_without_rerunning_a_step()
{
    let (client, ns, ctl) = setup("fusekill", json!([cm_rule()]), json!([])).await;
    // testenv runs a pod as a local process that sees this machine's filesystem; the file is
    // the observable side effect of `exec` (in a real pod it would be the pod's own disk).
    let dir: PathBuf = std::env::temp_dir().join(format!("pseudoflow-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("ran.log");
    let append = |what: &str| format!("echo {what} >> {}", log.display());
    create_flow(&client, &ns, "resume", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"type": "exec", "cmd": append("first")},
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "gate"}, "condition": "Exist", "timeoutSeconds": 120},
            {"type": "exec", "cmd": append("last")},
        ]
    }))
    .await;
    // Live progress: the first step is done and the second runs, inside one running Job.
    let mid = wait_step_running(&client, &ns, "resume", "spec.steps[1]").await;
    assert_eq!(step(&mid, "spec.steps[0]")["phase"], "Succeeded", "{mid:#}");
    // What `kubectl get pf` prints in its STEP column.
    assert!(
        mid["currentStep"]
            .as_str()
            .is_some_and(|s| s.starts_with("spec.steps[1]")),
        "{mid:#}"
    );
    let all = jobs(&client, &ns).await;
    assert_eq!(all.len(), 1);
    let job = all[0].metadata.name.clone().unwrap();
    assert!(
        all[0]
            .status
            .as_ref()
            .and_then(|s| s.completion_time.as_ref())
            .is_none(),
        "the segment's Job still runs"
    );
    // Kill the pod's process, as the OOM killer or a lost node would.
    let pids = executor_pids(&job);
    assert_eq!(pids.len(), 1, "one executor process for {job}: {pids:?}");
    unsafe { libc::kill(pids[0], libc::SIGKILL) };
    // The Job controller replaces the pod; the gate opens meanwhile.
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "namespace": ns}})).await;
    let status = wait_done(&client, &ns, "resume", 180).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let ran = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        ran, "first\nlast\n",
        "the step that ended before the kill ran once, the rest once after it"
    );
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .unwrap();
    assert_eq!(
        pods.items.len(),
        2,
        "a replacement pod finished the segment"
    );
    assert_eq!(jobs(&client, &ns).await.len(), 1, "no second Job");
    let _ = std::fs::remove_dir_all(&dir);
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_sleep_and_eval_between_api_steps_stay_in_the_segment_with_their_effects() {
    let (client, ns, ctl) = setup("fuselocal", json!([cm_rule()]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "local",
        json!({
            "serviceAccountName": "flow",
            "vars": {"who": "world"},
            "steps": [
                apply_cm("a", json!({})),
                {"type": "log", "message": "hello ${who}"},
                {"type": "sleep", "seconds": 1},
                {"type": "eval", "expression": "6 * 7", "var": "answer"},
                apply_cm("b", json!({})),
                // Reads `answer`, set inside the segment above: a second Job.
                apply_cm("c", json!({"answer": "is ${answer}"})),
            ]
        }),
    )
    .await;
    let status = wait_done(&client, &ns, "local", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    for i in 0..6 {
        let s = step(&status, &format!("spec.steps[{i}]"));
        assert_eq!(s["phase"], "Succeeded", "{s:#}");
    }
    assert_eq!(message(step(&status, "spec.steps[1]")), "hello world");
    assert_eq!(
        cm_data(&client, &ns, "c").await,
        Some(json!({"answer": "is 42"}))
    );
    assert_eq!(jobs(&client, &ns).await.len(), 2, "{status:#}");
    let logged = flow_events(&client, &ns, "local")
        .await
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("Log") && e.message.as_deref() == Some("hello world"));
    assert!(logged, "the log step's Event");
    // The sleep waited in the pod: the step after it started at least a second after it began.
    let sleep = step(&status, "spec.steps[2]");
    let (from, to) = (
        crate::common::api::unix(&sleep["startedAt"]),
        crate::common::api::unix(&sleep["finishedAt"]),
    );
    assert!(to - from >= 1, "{sleep:#}");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steps_own_timeout_ends_it_inside_a_segment_and_the_rest_never_runs() {
    let (client, ns, ctl) = setup("fusetimeout", json!([cm_rule()]), json!([])).await;
    create_flow(&client, &ns, "slow", json!({
        "serviceAccountName": "flow",
        "steps": [
            apply_cm("a", json!({})),
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "never"}, "condition": "Exist", "timeoutSeconds": 2},
            apply_cm("b", json!({})),
        ]
    }))
    .await;
    let status = wait_done(&client, &ns, "slow", 120).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(jobs(&client, &ns).await.len(), 1, "{status:#}");
    assert_eq!(step(&status, "spec.steps[0]")["phase"], "Succeeded");
    let waited = step(&status, "spec.steps[1]");
    assert_eq!(waited["phase"], "Failed", "{waited:#}");
    assert!(
        message(waited).starts_with("timed out after 2s"),
        "{waited:#}"
    );
    assert!(cm_data(&client, &ns, "b").await.is_none());
    ctl.abort();
}
