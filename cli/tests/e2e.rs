//! `kubectl-pf` end to end: the built binary against a real API server from testenv, with an
//! in-process controller running the flows (tests in this binary share one cluster, each in its
//! own namespace).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{run_controller, Context};
use pseudoflow_test_support::{
    apply, create_flow, flows, install_crd, wait_done, FlowNamespace, TestKind,
};
use pseudoflow_testenv::{shared_with, Options, TestEnv};
use serde_json::{json, Value};

const IMAGE: &str = "pseudoflow/runtime:e2e";

fn env() -> &'static TestEnv {
    shared_with(|| {
        let mut o = Options::default();
        o.images
            .insert_runtime(IMAGE, pseudoflow_test_support::step_binary());
        o
    })
    .unwrap_or_else(|e| panic!("testenv: {e}"))
}

/// A namespace whose ServiceAccount `flow` may manage ConfigMaps and Secrets and list nodes.
async fn namespace(prefix: &str) -> (Client, String) {
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = FlowNamespace::new(prefix)
        .rules(json!([{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]}]))
        .cluster_rules(json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]))
        .create(env, &client)
        .await;
    (client, ns)
}

fn start_controller(client: &Client, ns: &str) -> tokio::task::JoinHandle<()> {
    let ctx = Arc::new(Context::new(
        client.clone(),
        IMAGE.into(),
        Arc::new(Metrics::default()),
    ));
    tokio::spawn(run_controller(ctx, Some(ns.to_string())))
}

/// What one run of the plugin gave.
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `kubectl-pf --kubeconfig <kubeconfig> ARGS` off the runtime.
async fn pf_as(kubeconfig: PathBuf, args: &[&str]) -> Out {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let o = Command::new(env!("CARGO_BIN_EXE_kubectl-pf"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(&args)
            .output()
            .unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        }
    })
    .await
    .unwrap()
}

async fn pf(args: &[&str]) -> Out {
    pf_as(env().kubeconfig_path().to_path_buf(), args).await
}

/// A flow of two applies and a waitFor: one fused Job (step fusion), three status entries.
async fn run_fused_flow(client: &Client, ns: &str, name: &str) -> Value {
    create_flow(client, ns, name, json!({
        "serviceAccountName": "flow",
        "steps": [
            {"name": "first", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one", "namespace": ns}, "data": {"a": "1"}}},
            {"name": "second", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "two", "namespace": ns}, "data": {"b": "2"}}},
            {"name": "third", "type": "waitFor", "resource": {"kind": "ConfigMap", "name": "two", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 60}
        ]
    }))
    .await;
    let st = wait_done(client, ns, name, 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    st
}

async fn job_names(client: &Client, ns: &str) -> Vec<String> {
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_on_every_verb_and_shell_completion() {
    for verb in [
        "list",
        "get",
        "logs",
        "plan",
        "retry",
        "run",
        "stop",
        "suspend",
        "resume",
        "approve",
        "reject",
        "completion",
    ] {
        let o = pf(&[verb, "--help"]).await;
        assert_eq!(o.code, 0, "{verb} --help: {}", o.stderr);
        assert!(
            o.stdout.contains("Usage: kubectl pf"),
            "{verb}: {}",
            o.stdout
        );
        assert!(o.stdout.contains("--namespace"), "{verb}: -n on every verb");
    }
    for shell in ["bash", "zsh", "fish"] {
        let o = pf(&["completion", shell]).await;
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(
            o.stdout.contains("plan") && o.stdout.contains("suspend"),
            "{shell}"
        );
    }
    let o = pf(&["get"]).await;
    assert_eq!(o.code, 2, "a usage error: {}", o.stderr);
}

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
async fn suspend_and_resume_set_spec_suspend() {
    let (client, ns) = namespace("pf-suspend").await;
    create_flow(
        &client,
        &ns,
        "held",
        json!({"serviceAccountName": "flow", "steps": [{"type": "log", "message": "hi"}]}),
    )
    .await;
    let suspend = |client: Client, ns: String| async move {
        flows(&client, &ns).get("held").await.unwrap().data["spec"]["suspend"].as_bool()
    };
    let o = pf(&["suspend", "held", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("held suspended"), "{}", o.stdout);
    assert_eq!(suspend(client.clone(), ns.clone()).await, Some(true));
    let o = pf(&["resume", "held", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_ne!(suspend(client.clone(), ns.clone()).await, Some(true));
    let o = pf(&["suspend", "absent", "-n", &ns]).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("absent"), "{}", o.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_and_reject_set_the_annotation_again_each_time() {
    let (client, ns) = namespace("pf-approve").await;
    let ctl = start_controller(&client, &ns);
    create_flow(
        &client,
        &ns,
        "gated",
        json!({"serviceAccountName": "flow", "steps": [{"type": "approval", "name": "gate"}]}),
    )
    .await;
    // No webhook here: no decision is accepted, so the gate keeps waiting.
    let run = wait_gate_waiting(&client, &ns, "gated").await;
    let annotation = |client: Client, ns: String, key: &'static str| async move {
        flows(&client, &ns)
            .get("gated")
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
            .get(key)
            .cloned()
    };
    for _ in 0..2 {
        let o = pf(&["approve", "gated", "gate", "-n", &ns]).await;
        assert_eq!(o.code, 0, "{}", o.stderr);
        let said = format!("gated step \"gate\" of run {run} approved");
        assert!(o.stdout.contains(&said), "{}", o.stdout);
        let approve = annotation(client.clone(), ns.clone(), "ops.example.com/approve").await;
        assert_eq!(approve.as_deref(), Some("gate"));
    }
    let o = pf(&["reject", "gated", "gate", "-n", &ns, "--run", &run]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let reject = annotation(client.clone(), ns.clone(), "ops.example.com/reject").await;
    assert_eq!(reject.as_deref(), Some("gate"));
    let o = pf(&["approve", "absent", "gate", "-n", &ns]).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("absent"), "{}", o.stderr);
    ctl.abort();
}

/// Waits until step `gate` of flow `name` waits for approval; returns the run it waits in.
async fn wait_gate_waiting(client: &Client, ns: &str, name: &str) -> String {
    let st = pseudoflow_test_support::wait_status(client, ns, name, 60, "the gate waiting", |s| {
        s["reason"] == "WaitingForApproval"
    })
    .await;
    st["run"]["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_names_the_run_and_fails_for_another() {
    let (client, ns) = namespace("pf-approve-run").await;
    let ctl = start_controller(&client, &ns);
    create_flow(
        &client,
        &ns,
        "gated",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "log", "message": "before"},
            {"type": "approval", "name": "gate"},
        ]}),
    )
    .await;
    let run = wait_gate_waiting(&client, &ns, "gated").await;
    let approve_annotation = |client: Client, ns: String| async move {
        let f = flows(&client, &ns).get("gated").await.unwrap();
        f.metadata
            .annotations
            .unwrap_or_default()
            .get("ops.example.com/approve")
            .cloned()
    };
    // A run that is not the one waiting: refused, nothing set.
    let o = pf(&["approve", "gated", "gate", "-n", &ns, "--run", "r-older"]).await;
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr.contains("run r-older is not the run")
            && o.stderr.contains(&format!("waits in run {run}")),
        "{}",
        o.stderr
    );
    assert_eq!(approve_annotation(client.clone(), ns.clone()).await, None);
    // A step that is not waiting (another name): refused, naming the run.
    let o = pf(&["approve", "gated", "other", "-n", &ns]).await;
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr
            .contains(&format!("is not waiting for approval in run {run}")),
        "{}",
        o.stderr
    );
    assert_eq!(approve_annotation(client.clone(), ns.clone()).await, None);
    // The run it waits in: set, and said.
    let o = pf(&["approve", "gated", "gate", "-n", &ns, "--run", &run]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains(&format!("of run {run} approved")),
        "{}",
        o.stdout
    );
    assert_eq!(
        approve_annotation(client.clone(), ns.clone())
            .await
            .as_deref(),
        Some("gate")
    );
    ctl.abort();
}

/// resourceVersion of every ConfigMap, Secret and PseudoFlow of `ns` (not Nodes: the simulated
/// kubelets refresh their status every 10 s).
async fn versions(client: &Client, ns: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for cm in Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.push((
            format!("cm/{}", cm.metadata.name.unwrap()),
            cm.metadata.resource_version.unwrap(),
        ));
    }
    for s in Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.push((
            format!("secret/{}", s.metadata.name.unwrap()),
            s.metadata.resource_version.unwrap(),
        ));
    }
    for f in flows(client, ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.push((
            format!("pf/{}", f.metadata.name.unwrap()),
            f.metadata.resource_version.unwrap(),
        ));
    }
    out.sort();
    out
}

fn flow_doc(ns: &str, name: &str, steps: Value) -> Value {
    json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {"name": name, "namespace": ns},
        "spec": {"serviceAccountName": "flow", "vars": {"greeting": "new"}, "steps": steps}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_shows_changes_by_dry_run_and_changes_nothing() {
    let (client, ns) = namespace("pf-plan").await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "changed", "namespace": ns}, "data": {"greeting": "old", "kept": "yes"}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "doomed", "namespace": ns}, "data": {"x": "1"}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns}, "stringData": {"password": "old-hunter2", "user": "admin"}})).await;
    let steps = json!([
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "changed", "namespace": ns}, "data": {"greeting": "${greeting}", "kept": "yes"}}},
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fresh", "namespace": ns}, "data": {"hello": "world"}}},
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns}, "stringData": {"password": "new-hunter2", "user": "admin"}}},
        {"type": "delete", "target": {"kind": "ConfigMap", "name": "doomed", "namespace": ns}},
        {"type": "exec", "cmd": "echo computed", "var": "computed"},
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later", "namespace": ns}, "data": {"v": "${computed}"}}},
        {"type": "loopNodes", "selector": "", "steps": [{"type": "configFile", "path": "/etc/x.conf", "content": "x"}]}
    ]);
    // The applied flow (no controller in this namespace: it only sits there).
    apply(&client, flow_doc(&ns, "applied", steps.clone())).await;
    let file = env().dir().join(format!("{ns}-flow.yaml"));
    std::fs::write(
        &file,
        serde_yaml::to_string(&flow_doc(&ns, "unapplied", steps)).unwrap(),
    )
    .unwrap();

    let before = versions(&client, &ns).await;
    let by_file = pf(&["plan", "-f", file.to_str().unwrap()]).await;
    let by_name = pf(&["plan", "applied", "-n", &ns]).await;
    let after = versions(&client, &ns).await;
    println!("{}", by_name.stdout);
    assert_eq!(before, after, "plan changed nothing on the cluster");
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get_opt("fresh")
        .await
        .unwrap()
        .is_none());

    for o in [&by_file, &by_name] {
        let out = &o.stdout;
        assert_eq!(
            o.code, 1,
            "changes: exit 1 as flux diff; {out}\n{}",
            o.stderr
        );
        assert!(
            out.contains(&format!("as system:serviceaccount:{ns}:flow")),
            "{out}"
        );
        // A changed ConfigMap: a unified diff of its data, without managed fields.
        assert!(
            out.contains(&format!(
                "spec.steps[0] (apply) ConfigMap {ns}/changed: changed"
            )),
            "{out}"
        );
        assert!(
            out.contains("-  greeting: old") && out.contains("+  greeting: new"),
            "{out}"
        );
        assert!(
            !out.contains("managedFields") && !out.contains("resourceVersion"),
            "{out}"
        );
        // A new object.
        assert!(
            out.contains(&format!(
                "spec.steps[1] (apply) ConfigMap {ns}/fresh: added"
            )),
            "{out}"
        );
        assert!(out.contains("+  hello: world"), "{out}");
        // Secret data masked, keys kept, the change marked.
        assert!(out.contains(&format!("ConfigMap {ns}/changed")));
        assert!(
            out.contains(&format!("spec.steps[2] (apply) Secret {ns}/creds: changed")),
            "{out}"
        );
        assert!(
            out.contains("+  password: '*** (changed)'")
                || out.contains("+  password: \"*** (changed)\""),
            "{out}"
        );
        for secret in ["hunter2", "b2xkLWh1bnRlcjI", "bmV3LWh1bnRlcjI", "YWRtaW4"] {
            assert!(!out.contains(secret), "secret value {secret} leaked: {out}");
        }
        // A deletion.
        assert!(
            out.contains(&format!(
                "spec.steps[3] (delete) ConfigMap {ns}/doomed: deleted"
            )),
            "{out}"
        );
        assert!(
            out.contains("-  x: '1'") || out.contains("-  x: \"1\""),
            "{out}"
        );
        // A run-time value: undetermined, with the reason.
        assert!(out.contains("spec.steps[5] (apply): undetermined — uses ${computed}, set at run time by spec.steps[4] (exec)"), "{out}");
        // Node steps per target node.
        assert!(
            out.contains("spec.steps[6].steps[0] (configFile) /etc/x.conf: a node step"),
            "{out}"
        );
        for n in env().nodes() {
            assert!(out.contains(&format!("  node {n}\n")), "{n}: {out}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_exits_0_without_changes_and_2_on_errors() {
    let (client, ns) = namespace("pf-plan0").await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "same", "namespace": ns}, "data": {"a": "1"}})).await;
    apply(&client, flow_doc(&ns, "noop", json!([
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "same", "namespace": ns}, "data": {"a": "1"}}},
        {"type": "delete", "target": {"kind": "ConfigMap", "name": "gone-already", "namespace": ns}}
    ]))).await;
    let o = pf(&["plan", "noop", "-n", &ns]).await;
    assert_eq!(o.code, 0, "no change: {}\n{}", o.stdout, o.stderr);
    assert!(
        o.stdout
            .contains(&format!("ConfigMap {ns}/same: unchanged")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("absent, nothing to delete"),
        "{}",
        o.stdout
    );

    // The flow's ServiceAccount may not touch Deployments: the dry-run is refused, exit 2.
    apply(&client, flow_doc(&ns, "forbidden", json!([
        {"type": "apply", "manifests": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": ns},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}}
    ]))).await;
    let o = pf(&["plan", "forbidden", "-n", &ns]).await;
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("error") && o.stdout.contains("forbidden"),
        "{}",
        o.stdout
    );
    // A file of several flows: each planned, the exit code the worst (2 for the forbidden one).
    let docs = ["noop", "forbidden"];
    let mut text = String::new();
    for n in docs {
        let f = flows(&client, &ns).get(n).await.unwrap();
        let doc = flow_doc(&ns, n, f.data["spec"]["steps"].clone());
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(&doc).unwrap());
    }
    let file = env().dir().join(format!("{ns}-two.yaml"));
    std::fs::write(&file, text).unwrap();
    let o = pf(&["plan", "-f", file.to_str().unwrap()]).await;
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains(&format!("plan for pseudoflow {ns}/noop"))
            && o.stdout
                .contains(&format!("plan for pseudoflow {ns}/forbidden")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains(&format!("ConfigMap {ns}/same: unchanged")),
        "{}",
        o.stdout
    );

    let o = pf(&["plan", "absent", "-n", &ns]).await;
    assert_eq!(o.code, 2, "{}", o.stderr);
}

/// A kubeconfig for ServiceAccount `viewer` of `ns`, who may get and list flows there and
/// nothing else (no impersonation, no other kind).
async fn viewer_kubeconfig(client: &Client, ns: &str) -> PathBuf {
    apply(client, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer", "namespace": ns}})).await;
    apply(client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "viewer", "namespace": ns},
        "rules": [{"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["get", "list"]}]})).await;
    apply(client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "viewer", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": ns}]})).await;
    let req = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}});
    let tr: Value = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_subresource("token", "viewer", &PostParams::default(), &req)
        .await
        .unwrap();
    let token = tr["status"]["token"].as_str().unwrap();
    let mut kc: Value =
        serde_yaml::from_str(&std::fs::read_to_string(env().kubeconfig_path()).unwrap()).unwrap();
    for u in kc["users"].as_array_mut().unwrap() {
        u["user"] = json!({"token": token});
    }
    let path = env().dir().join(format!("{ns}-viewer.kubeconfig"));
    std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_refuses_a_user_who_may_not_impersonate() {
    let (client, ns) = namespace("pf-imp").await;
    apply(&client, flow_doc(&ns, "f", json!([{"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": ns}}}]))).await;
    // A user with read access to flows but no impersonate right: ServiceAccount `viewer`.
    let path = viewer_kubeconfig(&client, &ns).await;
    let o = pf_as(path.clone(), &["get", "f", "-n", &ns]).await;
    assert_eq!(o.code, 0, "the viewer may read the flow: {}", o.stderr);
    let started = Instant::now();
    let o = pf_as(path, &["plan", "f", "-n", &ns]).await;
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "refused: you may not impersonate ServiceAccount {ns}/flow"
        )),
        "{}",
        o.stderr
    );
    assert!(
        !o.stdout.contains("ConfigMap"),
        "nothing planned: {}",
        o.stdout
    );
    assert!(started.elapsed() < Duration::from_secs(30));
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

/// What `stdout` printed up to and including the first line `stop` accepts (read off the
/// runtime); fails the test if that line does not come within `secs`.
async fn lines_until(
    stdout: std::process::ChildStdout,
    secs: u64,
    stop: fn(&str) -> bool,
) -> String {
    let reading = tokio::task::spawn_blocking(move || {
        let mut seen = String::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if stop(&line) {
                break;
            }
        }
        seen
    });
    tokio::time::timeout(Duration::from_secs(secs), reading)
        .await
        .expect("the awaited line was not printed in time")
        .unwrap()
}

/// Spawns `kubectl-pf ARGS` with piped stdout.
fn spawn_pf(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_kubectl-pf"))
        .arg("--kubeconfig")
        .arg(env().kubeconfig_path())
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
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
async fn plan_previews_files_and_labels_and_marks_conditional_steps() {
    let (client, ns) = namespace("pf-plan2").await;
    let app = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: from-file, namespace: {ns}}}\ndata: {{g: \"${{greeting}}\"}}\n");
    let old =
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: old-file, namespace: {ns}}}\n");
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pseudoflow-artifacts", "namespace": ns}, "data": {"app.yaml": app, "old.yaml": old}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old-file", "namespace": ns}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "src", "namespace": ns}, "stringData": {"password": "copy-me-not", "user": "u"}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tagme", "namespace": ns, "labels": {"tier": "x"}}})).await;
    let cm = |name: &str| json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}});
    let cond = json!({"resource": {"kind": "ConfigMap", "name": "tagme", "namespace": ns}, "jsonPath": "{.metadata.name}", "op": "equals", "value": "tagme"});
    apply(&client, flow_doc(&ns, "files", json!([
        {"type": "applyFile", "path": "app.yaml"},
        {"type": "deleteFile", "path": "old.yaml"},
        {"type": "setLabel", "target": {"kind": "ConfigMap", "namespace": ns, "selector": {"matchLabels": {"tier": "x"}}}, "labels": {"zone": "a"}},
        {"type": "if", "condition": cond, "then": [cm("maybe")]},
        {"type": "when", "condition": cond},
        cm("guarded"),
        {"type": "include", "source": {"configMapRef": {"name": "shared", "key": "steps.yaml"}}, "as": "steps"},
        {"type": "parallel", "steps": [[cm("par-a")], [cm("par-b")]]},
        {"type": "deleteFile", "path": "/etc/legacy.conf", "nodeSelector": "!node-role.kubernetes.io/control-plane"},
        {"type": "copy", "from": {"kind": "Secret", "name": "src"}, "to": [{"namespace": ns, "name": "dst"}], "keys": [{"key": "password", "as": "pw"}]},
        {"type": "removeLabel", "target": {"kind": "ConfigMap", "name": "tagme", "namespace": ns}, "keys": ["tier"]}
    ]))).await;
    let before = versions(&client, &ns).await;
    let o = pf(&["plan", "files", "-n", &ns]).await;
    assert_eq!(versions(&client, &ns).await, before, "plan changed nothing");
    let out = &o.stdout;
    println!("{out}");
    assert_eq!(o.code, 1, "{out}\n{}", o.stderr);
    assert!(
        out.contains(&format!(
            "spec.steps[0] (applyFile) ConfigMap {ns}/from-file: added"
        )) && out.contains("+  g: new"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "spec.steps[1] (deleteFile) ConfigMap {ns}/old-file: deleted"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "spec.steps[2] (setLabel) ConfigMap {ns}/tagme: changed"
        )) && out.contains("     tier: x\n+    zone: a\n")
            && !out.contains("+apiVersion: v1\n+kind: ConfigMap\n metadata:"),
        "{out}"
    );
    assert!(
        !out.contains("pseudoflow-artifacts: changed"),
        "only the selected objects: {out}"
    );
    assert!(out.contains("spec.steps[3].then[0] (apply): undetermined — it runs only if the if at spec.steps[3] takes this branch at run time"), "{out}");
    assert!(out.contains("spec.steps[5] (apply): undetermined — it runs only if the when at spec.steps[4] holds at run time"), "{out}");
    assert!(
        out.contains(
            "spec.steps[6] (include): undetermined — its manifests are fetched at run time"
        ),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "spec.steps[7].steps[0][0] (apply) ConfigMap {ns}/par-a: added"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "spec.steps[7].steps[1][0] (apply) ConfigMap {ns}/par-b: added"
        )),
        "{out}"
    );
    assert!(
        out.contains("spec.steps[8] (deleteFile) /etc/legacy.conf: a node step"),
        "{out}"
    );
    // copy: the target as the executor would write it, its values masked.
    assert!(
        out.contains(&format!("spec.steps[9] (copy) Secret {ns}/dst: added")),
        "{out}"
    );
    assert!(
        out.contains("+  pw: '***'")
            && out.contains(&format!("+    ops.example.com/copied-from: {ns}/src")),
        "{out}"
    );
    assert!(
        !out.contains("copy-me-not")
            && !out.contains("Y29weS1tZS1ub3Q")
            && !out.contains("+  user:"),
        "{out}"
    );
    // removeLabel.
    assert!(
        out.contains(&format!(
            "spec.steps[10] (removeLabel) ConfigMap {ns}/tagme: changed"
        )) && out.contains("-    tier: x"),
        "{out}"
    );
    assert!(
        out.contains("  node worker-0\n") && !out.contains("  node cp-0\n"),
        "the selector's nodes only: {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_flow_starts_no_new_run_until_resumed() {
    let (client, ns) = namespace("pf-hold").await;
    let ctl = start_controller(&client, &ns);
    create_flow(
        &client,
        &ns,
        "held",
        json!({"serviceAccountName": "flow", "steps": [{"type": "log", "message": "hi"}]}),
    )
    .await;
    let first = wait_done(&client, &ns, "held", 60).await;
    assert_eq!(first["phase"], "Succeeded", "{first:#}");
    let run = first["run"]["id"].clone();

    let o = pf(&["suspend", "held", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    // A re-run request while suspended starts nothing.
    pseudoflow_test_support::request_run(&client, &ns, "held", "again").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = flows(&client, &ns).get("held").await.unwrap().data["status"].clone();
    assert_eq!(st["run"]["id"], run, "no new run while suspended: {st:#}");

    let o = pf(&["resume", "held", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let st = pseudoflow_test_support::wait_status(&client, &ns, "held", 60, "a new run", |st| {
        st["run"]["id"] != run && st["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(st["run"]["trigger"], "again", "{st:#}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_restarts_at_the_failed_step_and_refuses_what_it_cannot_retry() {
    let (client, ns) = namespace("pf-retry").await;
    let ctl = start_controller(&client, &ns);
    create_flow(&client, &ns, "flaky", json!({"serviceAccountName": "flow", "steps": [
        {"name": "made", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made", "namespace": ns}}},
        {"name": "gate", "type": "waitFor", "resource": {"kind": "ConfigMap", "name": "gate", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 2}
    ]}))
    .await;
    let failed = wait_done(&client, &ns, "flaky", 120).await;
    assert_eq!(failed["phase"], "Failed", "{failed:#}");
    let failed_run = failed["run"]["id"].as_str().unwrap().to_string();
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    // A step that does not exist: refused by the controller, told to the user.
    let o = pf(&["retry", "flaky", "--from", "nope", "-n", &ns]).await;
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("no step \"nope\""), "{}", o.stderr);

    cms.create(
        &Default::default(),
        &serde_json::from_value(json!({"metadata": {"name": "gate"}})).unwrap(),
    )
    .await
    .unwrap();
    let o = pf(&["retry", "flaky", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout
            .contains(&format!("retries run {failed_run} from gate")),
        "{}",
        o.stdout
    );
    let st = wait_done(&client, &ns, "flaky", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert_eq!(st["run"]["retryOf"], failed_run.as_str(), "{st:#}");
    // One Job in the retry, for the step that failed: the one that succeeded did not run again.
    let retry_jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!(
            "ops.example.com/run={}",
            st["run"]["id"].as_str().unwrap()
        )))
        .await
        .unwrap()
        .items;
    let nodes: Vec<String> = retry_jobs
        .iter()
        .map(|j| j.metadata.labels.as_ref().unwrap()["ops.example.com/node"].clone())
        .collect();
    assert_eq!(nodes, ["s1"], "{st:#}");
    // Nothing failed now: refused before anything is asked of the controller.
    let o = pf(&["retry", "flaky", "-n", &ns]).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("nothing failed"), "{}", o.stderr);
    ctl.abort();
}

/// `kubectl pf run` starts a run now, of an unscheduled flow and of a scheduled one before its
/// first slot (as `kubectl create job --from`), once per request; `kubectl pf stop` ends the
/// running run: its Job deleted, its next step never started, the run Aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_starts_a_run_now_and_stop_aborts_the_running_one() {
    let (client, ns) = namespace("pf-runstop").await;
    let ctl = start_controller(&client, &ns);
    let log = json!([{"type": "log", "message": "hi"}]);
    create_flow(
        &client,
        &ns,
        "once",
        json!({"serviceAccountName": "flow", "steps": log}),
    )
    .await;
    let first = wait_done(&client, &ns, "once", 60).await;
    let o = pf(&["run", "once", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let st = wait_done(&client, &ns, "once", 60).await;
    assert_ne!(st["run"]["id"], first["run"]["id"], "{st:#}");
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert!(
        o.stdout.contains(&format!(
            "run {} started",
            st["run"]["id"].as_str().unwrap()
        )),
        "{}",
        o.stdout
    );

    // Yearly: its first slot is months away, so only `run` starts it.
    create_flow(
        &client,
        &ns,
        "yearly",
        json!({"serviceAccountName": "flow", "schedule": "0 0 1 1 *", "steps": log}),
    )
    .await;
    pseudoflow_test_support::wait_status(&client, &ns, "yearly", 60, "waiting", |s| {
        s["reason"] == "WaitingForSchedule"
    })
    .await;
    let o = pf(&["run", "yearly", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    let st = wait_done(&client, &ns, "yearly", 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let manual = st["run"]["id"].clone();
    assert!(o.stdout.contains("started"), "{}", o.stdout);
    // The request is served once: no second run from the same value.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = flows(&client, &ns).get("yearly").await.unwrap().data["status"].clone();
    assert_eq!(st["run"]["id"], manual, "one run per request: {st:#}");
    assert!(
        st["nextScheduleTime"].is_string(),
        "still scheduled: {st:#}"
    );

    // Stop: a step waiting (in its Job) for a ConfigMap that never comes, then a step after it.
    create_flow(&client, &ns, "long", json!({"serviceAccountName": "flow", "steps": [
        {"name": "wait", "type": "waitFor", "isolate": true, "resource": {"kind": "ConfigMap", "name": "never", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 600},
        {"name": "after", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after", "namespace": ns}}}
    ]}))
    .await;
    let running =
        pseudoflow_test_support::wait_status(&client, &ns, "long", 60, "waiting in its Job", |s| {
            s["phase"] == "Running" && s["steps"][0]["phase"] == "Running"
        })
        .await;
    let run = running["run"]["id"].as_str().unwrap().to_string();
    let run_jobs = || async {
        Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels(&format!("ops.example.com/run={run}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .count()
    };
    assert_eq!(run_jobs().await, 1, "the wait step runs in its Job");
    let o = pf(&["stop", "long", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains(&format!("run {run} aborted")),
        "{}",
        o.stdout
    );
    let st = flows(&client, &ns).get("long").await.unwrap().data["status"].clone();
    assert_eq!(
        (st["phase"].as_str(), st["reason"].as_str()),
        (Some("Aborted"), Some("Aborted")),
        "{st:#}"
    );
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("Aborted")),
        "{st:#}"
    );
    assert_eq!(st["steps"][0]["phase"], "Aborted", "{st:#}");
    pseudoflow_test_support::eventually(30, "the running Job deleted", || async {
        run_jobs().await == 0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    assert!(
        cms.get_opt("after").await.unwrap().is_none(),
        "no step started after the stop"
    );
    let st = flows(&client, &ns).get("long").await.unwrap().data["status"].clone();
    assert_eq!(
        st["run"]["id"],
        run.as_str(),
        "the stop started no run: {st:#}"
    );
    assert_eq!(st["phase"], "Aborted", "{st:#}");
    // Nothing running now: refused, nothing asked of the controller.
    let o = pf(&["stop", "long", "-n", &ns]).await;
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr.contains("is not running (Aborted)"),
        "{}",
        o.stderr
    );
    ctl.abort();
}

/// `kubectl-pf __complete ARGS...`, as kubectl's `kubectl_complete-pf` runs it.
fn complete(args: &[&str]) -> Vec<String> {
    let o = Command::new(env!("CARGO_BIN_EXE_kubectl-pf"))
        .arg("__complete")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_plugin_completion_names_verbs_flows_and_files() {
    let (client, ns) = namespace("pf-complete").await;
    create_flow(
        &client,
        &ns,
        "alpha",
        json!({"serviceAccountName": "flow", "steps": [{"type": "log", "message": "a"}]}),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "beta",
        json!({"serviceAccountName": "flow", "steps": [{"type": "log", "message": "b"}]}),
    )
    .await;
    let kc = env().kubeconfig_path().display().to_string();
    let c = |args: Vec<&str>| {
        tokio::task::spawn_blocking({
            let args: Vec<String> = args.into_iter().map(String::from).collect();
            move || complete(&args.iter().map(String::as_str).collect::<Vec<_>>())
        })
    };
    assert_eq!(
        c(vec![""]).await.unwrap(),
        [
            "approve",
            "completion",
            "get",
            "list",
            "logs",
            "plan",
            "reject",
            "resume",
            "retry",
            "run",
            "stop",
            "suspend",
            ":4"
        ]
    );
    assert_eq!(
        c(vec!["--kubeconfig", &kc, "-n", &ns, "get", ""])
            .await
            .unwrap(),
        ["alpha", "beta", ":4"]
    );
    assert_eq!(
        c(vec!["--kubeconfig", &kc, "suspend", "-n", &ns, "b"])
            .await
            .unwrap(),
        ["beta", ":4"]
    );
    assert!(c(vec!["--kubeconfig", &kc, "-n", ""])
        .await
        .unwrap()
        .contains(&ns));
    assert_eq!(
        c(vec!["plan", "-f", ""]).await.unwrap(),
        [":0"],
        "file names for -f"
    );
    assert!(c(vec!["get", "--w"])
        .await
        .unwrap()
        .contains(&"--watch".to_string()));
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
    let ctx = Context::new(client.clone(), IMAGE.into(), Arc::new(Metrics::default()))
        .with_node_step_namespaces([ns.as_str()].into_iter().collect());
    let ctl = tokio::spawn(run_controller(Arc::new(ctx), Some(ns.clone())));
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

/// A namespace `prefix-…` with the kind `Thing`, rights on it for its ServiceAccount `flow`, a
/// controller, and the flow `things` bound to it (`record`: `bind.record`, none: the default)
/// serving one good object and one whose run fails (a version that is no valid name part).
async fn things_served(
    prefix: &str,
    record: Option<&str>,
) -> (Client, String, tokio::task::JoinHandle<()>) {
    let (client, ns) = namespace(prefix).await;
    let things = TestKind::new("cli.bind.example.com", "Thing");
    things.install(&client, &ns).await;
    apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "things", "namespace": ns}, "rules": things.bound_rules()}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "things", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "things"},
        "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]}),
    )
    .await;
    // The controller acts as the flow's ServiceAccount by impersonation: it needs a config.
    let kubeconfig = kube::config::Kubeconfig::read_from(env().kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let ctx = Context::new(client.clone(), IMAGE.into(), Arc::new(Metrics::default()))
        .with_config(config);
    let ctl = tokio::spawn(run_controller(Arc::new(ctx), Some(ns.clone())));
    let mut bind = json!({"apiVersion": "cli.bind.example.com/v1", "kind": "Thing"});
    if let Some(r) = record {
        bind["record"] = json!(r);
    }
    create_flow(&client, &ns, "things", json!({"serviceAccountName": "flow", "bind": bind,
        "steps": [{"type": "apply", "name": "made", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "${object.metadata.name}-${object.spec.version}", "namespace": ns}}}]}))
    .await;
    for (name, version) in [("good", "one"), ("bad", "NOT_A_NAME")] {
        apply(
            &client,
            things.object(&ns, name, json!({"version": version})),
        )
        .await;
    }
    (client, ns, ctl)
}

/// `get` of a flow bound to a kind: its objects, each with the flow serving it and its latest
/// run (the failed one with why), instead of a step tree it does not have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_of_a_bound_flow_lists_its_objects_with_their_runs() {
    let (client, ns, ctl) = things_served("pf-bound", None).await;
    pseudoflow_test_support::wait_status(&client, &ns, "things", 120, "both objects done", |st| {
        st["bound"]["running"] == 1 && st["bound"]["failed"] == 1
    })
    .await;

    let o = pf(&["list", "-n", &ns]).await;
    let listed = o
        .stdout
        .lines()
        .find(|l| l.contains(" things "))
        .unwrap_or("");
    assert!(listed.contains("1/2 objects"), "{}", o.stdout);

    let o = pf(&["get", "things", "-n", &ns]).await;
    println!("{}", o.stdout);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let out = &o.stdout;
    assert!(
        out.contains("2 Thing object(s): 1 Running, 0 Creating, 1 Failed"),
        "{out}"
    );
    assert!(!out.contains("no step has run yet"), "{out}");
    let row = |object: &str| {
        let key = format!("{ns}/{object} ");
        out.lines()
            .find(|l| l.starts_with(&key))
            .unwrap_or_else(|| panic!("no row for {object}: {out}"))
            .to_string()
    };
    let good = row("good");
    assert!(good.contains("Succeeded") && good.contains("ago"), "{good}");
    assert!(good.contains("things-"), "the flow serving it: {good}");
    let bad = row("bad");
    assert!(bad.contains("Failed"), "{bad}");
    assert!(
        bad.contains("spec.steps[0]") && bad.contains("bad-NOT_A_NAME"),
        "why it failed: {bad}"
    );
    assert!(
        !good.contains("spec.steps"),
        "no message for a run that succeeded: {good}"
    );
    ctl.abort();
}

/// `get` of a flow bound to a kind and recorded in its objects (`bind.record: Object`): it has
/// no child flow, so each object's row comes from the object itself (its status and this
/// flow's served mark), and a served object that failed is a row, not a `not served` line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_of_a_bound_flow_recorded_in_its_objects_lists_them_from_the_objects() {
    let (client, ns, ctl) = things_served("pf-inobj", Some("Object")).await;
    pseudoflow_test_support::wait_status(&client, &ns, "things", 120, "both objects done", |st| {
        st["bound"]["running"] == 1 && st["bound"]["failed"] == 1
    })
    .await;

    let o = pf(&["list", "-n", &ns]).await;
    let listed = o
        .stdout
        .lines()
        .find(|l| l.contains(" things "))
        .unwrap_or("");
    assert!(listed.contains("1/2 objects"), "{}", o.stdout);

    let o = pf(&["get", "things", "-n", &ns]).await;
    println!("{}", o.stdout);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let out = &o.stdout;
    assert!(
        out.contains("2 Thing object(s): 1 Running, 0 Creating, 1 Failed"),
        "{out}"
    );
    assert!(!out.contains("no object of the kind matches yet"), "{out}");
    assert!(!out.contains("not served"), "both were served: {out}");
    let row = |object: &str| {
        let key = format!("{ns}/{object} ");
        out.lines()
            .find(|l| l.starts_with(&key))
            .unwrap_or_else(|| panic!("no row for {object}: {out}"))
            .to_string()
    };
    let good = row("good");
    assert!(good.contains("(in object)"), "no child flow: {good}");
    assert!(good.contains("Running") && good.contains("ago"), "{good}");
    assert!(
        !good.contains("spec.steps"),
        "no message for a run that succeeded: {good}"
    );
    let bad = row("bad");
    assert!(
        bad.contains("(in object)") && bad.contains("Failed"),
        "{bad}"
    );
    assert!(
        bad.contains("spec.steps[0]") && bad.contains("bad-NOT_A_NAME"),
        "why it failed: {bad}"
    );

    // A user who may read the flow but not list Things: a line naming the right, no crash.
    let viewer = viewer_kubeconfig(&client, &ns).await;
    let o = pf_as(viewer, &["get", "things", "-n", &ns]).await;
    assert_eq!(o.code, 0, "the flow is still shown: {}", o.stderr);
    let what = "things.cli.bind.example.com";
    assert!(
        o.stdout.contains(&format!(
            "cannot list {what} in namespace {ns}: you lack the right to list {what}"
        )),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("2 Thing object(s)"), "{}", o.stdout);
    assert!(
        o.stdout
            .contains(&format!("failed: {ns}/bad: spec.steps[0]")),
        "the status's latest failures, not called unserved: {}",
        o.stdout
    );
    assert!(!o.stdout.contains("not served"), "{}", o.stdout);
    assert!(
        !o.stdout.contains("no object of the kind matches yet"),
        "{}",
        o.stdout
    );
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
    // The controller acts as the flow's ServiceAccount from the admin's client configuration.
    let kubeconfig = kube::config::Kubeconfig::read_from(env().kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let ctx = Context::new(client.clone(), IMAGE.into(), Arc::new(Metrics::default()))
        .with_config(config);
    let ctl = tokio::spawn(run_controller(Arc::new(ctx), Some(ns.clone())));
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
