//! `logs [STEP] [-f]`: a fused segment split per step, a command's output only where asked,
//! a closed pipe, and a step the controller ran itself.

use std::process::{Command, Stdio};

use pseudoflow_test_support::{create_flow, wait_done};
use serde_json::json;

use crate::support::{
    complete, env, job_names, namespace, pf, run_fused_flow, start_controller,
    start_impersonating_controller,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_split_a_fused_segment_per_step() {
    let (client, ns) = namespace("pf-logs").await;
    let ctl = start_controller(&client, &ns);
    run_fused_flow(&client, &ns, "logged").await;

    let o = pf(&["logs", "logged", "-n", &ns]).await;
    println!("{}", o.stdout);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let out = &o.stdout;
    let pos = |marker: &str| {
        out.lines()
            .position(|l| l.contains(marker))
            .unwrap_or_else(|| panic!("{marker}: {out}"))
    };
    let (a, b, c) = (
        pos("segment step starting node=s0"),
        pos("segment step starting node=s1"),
        pos("segment step starting node=s2"),
    );
    assert!(a < b && b < c, "in step order: {out}");
    assert!(out.lines().nth(a).unwrap().starts_with("[first] "), "{out}");
    assert!(
        out.lines().nth(b).unwrap().starts_with("[second] "),
        "{out}"
    );
    assert!(out.lines().nth(c).unwrap().starts_with("[third] "), "{out}");

    // One step of the fused segment: only its lines.
    let o = pf(&["logs", "logged", "second", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stdout.is_empty());
    assert!(
        o.stdout.lines().all(|l| l.starts_with("[second] ")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("node=s1")
            && !o.stdout.contains("node=s0")
            && !o.stdout.contains("node=s2"),
        "{}",
        o.stdout
    );
    // By path too, and -f ends with the run.
    let o = pf(&["logs", "logged", "spec.steps[2]", "-f", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.lines().all(|l| l.starts_with("[third] ")) && o.stdout.contains("node=s2"),
        "{}",
        o.stdout
    );

    // kubectl's plugin completion: `kubectl pf logs logged t<TAB>`.
    let kc = env().kubeconfig_path().display().to_string();
    let lines = complete(&["--kubeconfig", &kc, "-n", &ns, "logs", "logged", "t"]);
    assert_eq!(lines, ["third", ":4"]);

    let o = pf(&["logs", "logged", "nope", "-n", &ns]).await;
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("no step \"nope\"") && o.stderr.contains("second"),
        "{}",
        o.stderr
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_show_a_commands_output_only_for_a_step_with_log_output_and_never_a_variables_value() {
    let (client, ns) = namespace("pf-output").await;
    let ctl = start_controller(&client, &ns);
    create_flow(&client, &ns, "talk", json!({"serviceAccountName": "flow", "steps": [
        {"name": "loud", "type": "exec", "cmd": "echo hello-from-loud; echo warned-on-stderr >&2", "logOutput": true},
        {"name": "quiet", "type": "exec", "cmd": "echo hush-value", "var": "kept"}
    ]}))
    .await;
    let st = wait_done(&client, &ns, "talk", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let o = pf(&["logs", "talk", "loud", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("hello-from-loud"), "{}", o.stdout);
    assert!(o.stdout.contains("warned-on-stderr"), "{}", o.stdout);
    // Off by default: the other step's stdout (a variable's value) is in no log.
    let o = pf(&["logs", "talk", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("hello-from-loud"), "{}", o.stdout);
    assert!(!o.stdout.contains("hush-value"), "{}", o.stdout);
    ctl.abort();
}

/// `kubectl pf logs NAME | head`: the reader closes the pipe before the plugin writes; that is
/// a normal end (exit 0), never a panic (`println!` panicked: "failed printing to stdout").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_into_a_closed_pipe_end_quietly_with_success() {
    let (client, ns) = namespace("pf-pipe").await;
    let ctl = start_controller(&client, &ns);
    run_fused_flow(&client, &ns, "piped").await;
    let status = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-pf"))
            .arg("--kubeconfig")
            .arg(env().kubeconfig_path())
            .args(["logs", "piped", "-n", &ns])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Closed before the plugin has read the flow, so its first line meets no reader.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    })
    .await
    .unwrap();
    assert_eq!(status, (Some(0), String::new()), "exit code and stderr");
    ctl.abort();
}

/// A step the controller ran itself (`options.apiSteps: Controller`) has no pod: `logs` says
/// so, for every step and for that step alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_a_step_run_inside_the_controller_say_it_has_no_pod() {
    let (client, ns) = namespace("pf-inctl").await;
    let ctl = start_impersonating_controller(&client, &ns).await;
    create_flow(&client, &ns, "quick", json!({
        "serviceAccountName": "flow", "options": {"apiSteps": "Controller"},
        "steps": [{"name": "made", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "quick", "namespace": ns}}}]
    }))
    .await;
    let st = wait_done(&client, &ns, "quick", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert!(job_names(&client, &ns).await.is_empty(), "no Job for it");
    for args in [vec!["logs", "quick"], vec!["logs", "quick", "made"]] {
        let mut args = args.clone();
        args.extend(["-n", &ns]);
        let o = pf(&args).await;
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert_eq!(
            o.stdout.trim(),
            "[made] ran inside the controller (options.apiSteps: Controller): no pod, so no log; its outcome: `kubectl pf get quick` and the flow's Events",
            "{args:?}"
        );
    }
    ctl.abort();
}
