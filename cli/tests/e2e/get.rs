//! `list` and `get [-w]`: a run as a tree with its Jobs, loop iterations and node instances, and
//! a watch that redraws while a run goes on (with `logs -f` following the same run).

use std::time::Duration;

use kube::api::Api;
use pseudoflow_test_support::{create_flow, wait_done};
use serde_json::{json, Value};

use crate::support::{
    context, job_names, lines_until, namespace, pf, run_fused_flow, spawn_controller, spawn_pf,
    start_controller,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_get_show_the_run_as_a_tree_with_its_job() {
    let (client, ns) = namespace("pf-get").await;
    let ctl = start_controller(&client, &ns);
    run_fused_flow(&client, &ns, "tree").await;
    let jobs = job_names(&client, &ns).await;
    assert_eq!(jobs.len(), 1, "the three steps share one Job: {jobs:?}");

    let o = pf(&["list", "-n", &ns]).await;
    println!("{}", o.stdout);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let row = o
        .stdout
        .lines()
        .find(|l| l.contains("tree"))
        .unwrap_or_else(|| panic!("{}", o.stdout));
    assert!(
        row.starts_with(&ns)
            && row.contains("Succeeded")
            && row.contains("ago")
            && row.contains("3/3"),
        "{row}"
    );
    assert!(o.stdout.starts_with("NAMESPACE"), "{}", o.stdout);

    let o = pf(&["list", "-A", "-o", "json"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert!(v["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["metadata"]["name"] == "tree" && f["metadata"]["namespace"] == ns.as_str()));

    let o = pf(&["get", "tree", "-n", &ns]).await;
    println!("{}", o.stdout);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let out = &o.stdout;
    assert!(out.contains(&format!("{ns}/tree  Succeeded")), "{out}");
    for (step, ty) in [
        ("first", "apply"),
        ("second", "apply"),
        ("third", "waitFor"),
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{step} ({ty})")))
            .unwrap_or_else(|| panic!("{step}: {out}"));
        assert!(line.contains("Succeeded"), "{line}");
    }
    // Every member of the fused segment names the one Job and its pod.
    for step in ["first", "second", "third"] {
        let line = out.lines().find(|l| l.starts_with(step)).unwrap();
        assert!(
            line.contains(&format!("{}/{}-", jobs[0], jobs[0])),
            "{line}"
        );
    }

    let o = pf(&["get", "tree", "-n", &ns, "-o", "yaml"]).await;
    assert_eq!(o.code, 0);
    let v: Value = serde_yaml::from_str(&o.stdout).unwrap();
    assert_eq!(v["status"]["phase"], "Succeeded");

    let o = pf(&["get", "missing", "-n", &ns]).await;
    assert_eq!(o.code, 1, "kubectl's exit code for an error");
    assert!(o.stderr.contains("missing"), "{}", o.stderr);
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_draws_the_tree_and_keeps_running() {
    let (client, ns) = namespace("pf-watch").await;
    let ctl = start_controller(&client, &ns);
    run_fused_flow(&client, &ns, "watched").await;
    let mut child = spawn_pf(&["get", "watched", "-w", "-n", &ns]);
    let stdout = child.stdout.take().unwrap();
    let seen = lines_until(stdout, 30, |line| line.starts_with("third")).await;
    assert!(seen.contains("\x1b[2J"), "clears the screen before drawing");
    assert!(seen.contains("watched  Succeeded"), "{seen}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "-w keeps watching");
    child.kill().unwrap();
    child.wait().unwrap();
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_shows_loop_iterations_one_line_per_job() {
    let (client, ns) = namespace("pf-loop").await;
    let ctl = start_controller(&client, &ns);
    create_flow(&client, &ns, "looped", json!({
        "serviceAccountName": "flow",
        "vars": {"names": "a,b,c"},
        "steps": [{"type": "loop", "forEach": "${names.split(',')}", "steps": [
            {"name": "make", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-${item}", "namespace": ns}}}
        ]}]
    }))
    .await;
    let st = wait_done(&client, &ns, "looped", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let o = pf(&["get", "looped", "-n", &ns]).await;
    println!("{}", o.stdout);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let out = &o.stdout;
    let make = out
        .lines()
        .find(|l| l.trim_start().starts_with("make (apply)"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(make.starts_with("  "), "nested under the loop: {make}");
    assert!(make.contains("3/3 succeeded, 0 failed"), "{make}");
    let iterations: Vec<&str> = out.lines().filter(|l| l.contains("└")).collect();
    assert_eq!(iterations.len(), 3, "one line per iteration's Job: {out}");
    let jobs = job_names(&client, &ns).await;
    for j in &jobs {
        assert!(
            iterations
                .iter()
                .any(|l| l.contains(j.as_str()) && l.contains("Succeeded")),
            "{j}: {out}"
        );
    }
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_a_run_goes_on_get_w_redraws_and_logs_f_follows_it_to_the_end() {
    let (client, ns) = namespace("pf-follow").await;
    create_flow(&client, &ns, "slow", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"name": "before", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one", "namespace": ns}}},
            {"name": "pause", "type": "sleep", "seconds": 3},
            {"name": "after", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "two", "namespace": ns}}}
        ]
    }))
    .await;
    // Both start before the controller does: the run has not begun.
    let mut watch = spawn_pf(&["get", "slow", "-w", "-n", &ns]);
    let follow = spawn_pf(&["logs", "slow", "-f", "-n", &ns]);
    let ctl = start_controller(&client, &ns);
    let stdout = watch.stdout.take().unwrap();
    let frames = lines_until(stdout, 90, |line| line.contains("slow  Succeeded")).await;
    assert!(
        frames.matches("\x1b[2J").count() >= 3,
        "redrawn on changes: {frames}"
    );
    assert!(
        frames.contains("slow  Running") || frames.contains("slow  Pending"),
        "{frames}"
    );
    assert!(
        frames
            .lines()
            .any(|l| l.starts_with("pause (sleep)") && l.contains("Running")),
        "the sleep was seen running: {frames}"
    );
    watch.kill().unwrap();
    watch.wait().unwrap();

    // logs -f ends by itself once the run is over, with the lines of both Jobs.
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || follow.wait_with_output().unwrap()),
    )
    .await
    .expect("logs -f ends with the run")
    .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    let first = text
        .lines()
        .position(|l| l.starts_with("[before] "))
        .unwrap_or_else(|| panic!("{text}"));
    let last = text
        .lines()
        .position(|l| l.starts_with("[after] "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(first < last, "{text}");
    for l in text.lines() {
        assert!(
            ["[before] ", "[pause] ", "[after] "]
                .iter()
                .any(|p| l.starts_with(p)),
            "every line names its step: {l}"
        );
    }
    assert!(text.contains("finished changed=true ok=true"), "{text}");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_logs_show_node_instances() {
    let (client, ns) = namespace("pf-nodes").await;
    // Both halves of the node-step opt-in: the namespace label and the controller's allow-list.
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            &ns,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})),
        )
        .await
        .unwrap();
    let ctx = context(&client).with_node_step_namespaces([ns.as_str()].into_iter().collect());
    let ctl = spawn_controller(ctx, &ns);
    let file = format!("/etc/pf-cli-{ns}.conf");
    create_flow(&client, &ns, "nodes", json!({
        "serviceAccountName": "flow",
        "steps": [{"type": "loopNodes", "selector": "!node-role.kubernetes.io/control-plane", "steps": [
            {"name": "conf", "type": "configFile", "path": file, "content": "x = 1\n"}
        ]}]
    }))
    .await;
    let st = wait_done(&client, &ns, "nodes", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");

    let o = pf(&["get", "nodes", "-n", &ns]).await;
    println!("{}", o.stdout);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for node in ["worker-0", "worker-1"] {
        let line = o
            .stdout
            .lines()
            .find(|l| l.contains("└") && l.contains(node))
            .unwrap_or_else(|| panic!("{node}: {}", o.stdout));
        assert!(
            line.contains("Succeeded") && line.contains("nodes-"),
            "{line}"
        );
    }
    assert!(!o.stdout.contains("cp-0"), "{}", o.stdout);

    let o = pf(&["logs", "nodes", "conf", "-n", &ns]).await;
    println!("{}", o.stdout);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for node in ["worker-0", "worker-1"] {
        assert!(
            o.stdout
                .lines()
                .any(|l| l.starts_with(&format!("[conf {node}] "))),
            "{node}: {}",
            o.stdout
        );
    }
    ctl.abort();
}
