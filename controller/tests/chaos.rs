//! The chaos suite, so surviving failures is shown, not assumed: the real `pseudoflow-controller`
//! binary as a child process of the test, on testenv (real kube-apiserver, etcd,
//! kube-controller-manager and kube-scheduler, simulated kubelets), while things fail mid-flow:
//!
//! 1. the controller is SIGKILLed at seeded random points across a mix of flows, and restarted
//!    (their consecutive steps are fused — docs/decisions.md#step-fusion — so kills also land
//!    while a segment's Job runs and its journal is read; a segment's pod killed mid-way is in
//!    `fusion.rs`);
//! 2. kube-apiserver, then etcd, are killed and restarted on the same data mid-flow;
//! 3. a node dies while its node step runs (with a step timeout, and without one: the step
//!    fails once the node is marked Unknown, its Job deleted);
//! 4. the leader of two replicas is SIGKILLed mid-run;
//! 5. the controller is SIGKILLed while a deleted flow's `onDelete` steps run;
//! 6. the controller is SIGKILLed in the middle of a bound flow's rollout in waves
//!    (docs/bound-flows.md#rollouts): the new process goes on where it was;
//! 7. the controller is SIGKILLed while the runs of a flow recorded in its objects wait after a
//!    command they ran in another pod (an `exec` not safe to repeat): the new process resumes
//!    each run from the object's sealed progress record, and no command runs twice.
//!
//! Each checks that every flow reaches its correct final phase, that no Job is created twice for
//! the same (run, node, instance, attempt) (a watch records every Job created), that every
//! step appending a line to a file ran exactly once, and that status agrees with the Jobs.
//! Randomness is seeded: the seed is printed first, and `CHAOS_SEED=<seed>` replays a schedule;
//! `CHAOS_KILLS=<n>` sets the number of kills of test 1 (`make soak`: 500).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use kube::Client;
use pseudoflow_compiler::lower::DEADLINE_GRACE_SECONDS;
use pseudoflow_testenv::env::Component;
use serde_json::{json, Value};

use pseudoflow_test_support as common;

use common::chaos::*;
use common::{bound, create_flow, flows, install_crd, label_privileged, FlowNamespace};

/// Kills made by [`controller_sigkilled_at_random_points_loses_and_duplicates_nothing`] unless
/// `CHAOS_KILLS` says otherwise: what keeps it around two minutes on two cores.
const DEFAULT_KILLS: usize = 50;

/// A namespace whose flow ServiceAccount may manage ConfigMaps and list nodes, labelled for
/// node steps.
async fn namespace(client: &Client, prefix: &str) -> String {
    install_crd(client).await;
    let ns = FlowNamespace::new(prefix)
        .rules(json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}]))
        .cluster_rules(json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]))
        .create(env(), client)
        .await;
    label_privileged(client, &ns).await;
    ns
}

fn exec(cmd: String) -> Value {
    json!({"type": "exec", "cmd": cmd})
}

/// One flow of a wave of test 1: its spec, the phase it must end in, the lines its steps append
/// to its file, and whether the test deletes it once it succeeded (to run its onDelete steps).
struct Planned {
    name: String,
    spec: Value,
    phase: &'static str,
    file: std::path::PathBuf,
    lines: Vec<String>,
    delete: bool,
}

/// The mix of test 1, wave `w`: sequential, parallel, a rolling loopNodes (one succeeding, one
/// stopping at worker-0), retry with backoff, and a flow with onDelete steps.
fn wave(ns: &str, w: usize) -> Vec<Planned> {
    let dir = marker_dir(ns);
    let file = |name: &str| dir.join(format!("{name}.log"));
    let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut out = Vec::new();

    let name = format!("seq-{w}");
    let f = file(&name);
    out.push(Planned {
        spec: json!({"serviceAccountName": "flow", "steps": [
            exec(append(&f, "seq-1")),
            exec(format!("sleep 0.3; {}", append(&f, "seq-2"))),
            {"type": "log", "message": "half way"},
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}},
            exec(append(&f, "seq-3")),
        ]}),
        phase: "Succeeded",
        lines: lines(&["seq-1", "seq-2", "seq-3"]),
        file: f,
        name,
        delete: false,
    });

    let name = format!("par-{w}");
    let f = file(&name);
    out.push(Planned {
        spec: json!({"serviceAccountName": "flow", "steps": [{"type": "parallel", "steps": [
            [exec(append(&f, "a-1")), exec(append(&f, "a-2"))],
            [exec(append(&f, "b-1")), exec(append(&f, "b-2"))],
            [exec(append(&f, "c-1"))],
        ]}, exec(append(&f, "joined"))]}),
        phase: "Succeeded",
        lines: lines(&["a-1", "a-2", "b-1", "b-2", "c-1", "joined"]),
        file: f,
        name,
        delete: false,
    });

    // Rolling over cp-0, worker-0, worker-1 (sorted by name), never the edge nodes.
    let name = format!("roll-{w}");
    let f = file(&name);
    out.push(Planned {
        spec: json!({"serviceAccountName": "flow", "steps": [
            {"type": "loopNodes", "selector": format!("!{EDGE_LABEL}"), "maxParallel": 1, "steps": [
                {"type": "execNode", "cmd": format!("echo ${{node}} >> {}", f.display())},
                {"type": "configFile", "path": format!("/etc/chaos/{ns}-{w}.conf"), "content": "rolled on ${node}\n"},
            ]}
        ]}),
        phase: "Succeeded",
        lines: lines(&["cp-0", "worker-0", "worker-1"]),
        file: f,
        name,
        delete: false,
    });

    let name = format!("rollstop-{w}");
    let f = file(&name);
    out.push(Planned {
        spec: json!({"serviceAccountName": "flow", "steps": [
            {"type": "loopNodes", "selector": format!("!{EDGE_LABEL}"), "maxParallel": 1, "steps": [
                {"type": "execNode", "cmd": format!("echo ${{node}} >> {}; test ${{node}} != worker-0", f.display())},
            ]}
        ]}),
        phase: "Failed",
        lines: lines(&["cp-0", "worker-0"]),
        file: f,
        name,
        delete: false,
    });

    // Attempt n appends try-n; the third succeeds (backoff 1 s, then 2 s).
    let name = format!("retry-{w}");
    let f = file(&name);
    let flaky = format!(
        "n=$(cat {0} 2>/dev/null | wc -l); echo try-$n >> {0}; test $n -ge 2",
        f.display()
    );
    out.push(Planned {
        spec: json!({"serviceAccountName": "flow", "steps": [
            {"type": "retry", "attempts": 3, "backoffSeconds": 1, "steps": [exec(flaky)]}
        ]}),
        phase: "Succeeded",
        lines: lines(&["try-0", "try-1", "try-2"]),
        file: f,
        name,
        delete: false,
    });

    let name = format!("ondel-{w}");
    let f = file(&name);
    out.push(Planned {
        spec: json!({"serviceAccountName": "flow",
            "steps": [exec(append(&f, "main"))],
            "onDelete": [exec(append(&f, "od-1")), exec(format!("sleep 0.3; {}", append(&f, "od-2")))]}),
        phase: "Succeeded",
        lines: lines(&["main", "od-1", "od-2"]),
        file: f,
        name,
        delete: true,
    });
    out
}

/// Runs one wave to its end (each flow final; the deleted ones gone), checks it, and returns
/// how many flows it ran.
async fn run_wave(client: &Client, ns: &str, ledger: &Ledger, w: usize) -> usize {
    let planned = wave(ns, w);
    for p in &planned {
        create_flow(client, ns, &p.name, p.spec.clone()).await;
    }
    let mut finals: Vec<Option<Value>> = vec![None; planned.len()];
    let mut deleted = vec![false; planned.len()];
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let mut done = true;
        for (i, p) in planned.iter().enumerate() {
            if deleted[i] {
                if flows(client, ns).get_opt(&p.name).await.unwrap().is_some() {
                    done = false;
                }
                continue;
            }
            if finals[i].is_some() {
                continue;
            }
            let st = status_of(client, ns, &p.name).await.unwrap_or_default();
            if is_final(&st) {
                if p.delete && st["phase"] == "Succeeded" {
                    assert_status_agrees_with_jobs(client, ns, &p.name, &st).await;
                    flows(client, ns)
                        .delete(&p.name, &DeleteParams::default())
                        .await
                        .unwrap();
                    deleted[i] = true;
                    done = false;
                }
                finals[i] = Some(st);
            } else {
                done = false;
            }
        }
        if done {
            break;
        }
        if Instant::now() > deadline {
            let pending: Vec<String> = planned
                .iter()
                .zip(&finals)
                .filter(|(_, f)| f.is_none())
                .map(|(p, _)| p.name.clone())
                .collect();
            panic!("wave {w}: flows {pending:?} not done after 240 s; deleted ones pending: {deleted:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for (p, st) in planned.iter().zip(&finals) {
        let st = st.as_ref().unwrap();
        assert_eq!(st["phase"], p.phase, "flow {}: {st:#}", p.name);
        assert_lines_once(&p.file, &p.lines, &p.name);
        if !p.delete {
            assert_status_agrees_with_jobs(client, ns, &p.name, st).await;
        }
    }
    let dups = ledger.duplicates();
    assert!(dups.is_empty(), "wave {w}: Jobs created twice: {dups:#?}");
    planned.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_sigkilled_at_random_points_loses_and_duplicates_nothing() {
    let _shared = cluster_lock().read().await;
    let env = env();
    let client = env.client().await.unwrap();
    let (mut rng, seed) = Rng::from_env("kills");
    let kills = kills_from_env(DEFAULT_KILLS);
    let ns = namespace(&client, "chaos-kill").await;
    let ledger = Ledger::watch(&client, &ns).await;
    let mut controller = Controller::start("chaos-kill", std::slice::from_ref(&ns), None);
    let t0 = Instant::now();

    // The killer: after a random 0.2–2.5 s of work, SIGKILL; after 0–0.3 s, start again.
    let killer = tokio::spawn(async move {
        let mut restarts = Vec::new();
        for _ in 0..kills {
            tokio::time::sleep(rng.millis(200, 2500)).await;
            controller.kill().await;
            tokio::time::sleep(rng.millis(0, 300)).await;
            controller.restart();
            restarts.push(Instant::now());
        }
        (controller, restarts)
    });
    let mut waves = 0;
    let mut flows_run = 0;
    while !killer.is_finished() {
        let ran = std::panic::AssertUnwindSafe(run_wave(&client, &ns, &ledger, waves));
        match futures::FutureExt::catch_unwind(ran).await {
            Ok(n) => flows_run += n,
            Err(e) => {
                eprintln!(
                    "kills: failed with CHAOS_SEED={seed}; controller log: {}",
                    env.dir().join("logs/chaos-kill.log").display()
                );
                std::panic::resume_unwind(e);
            }
        }
        waves += 1;
    }
    let (mut controller, restarts) = killer.await.unwrap();
    controller.assert_running("after the last restart");
    ledger.sweep(&client, &ns).await;
    let dups = ledger.duplicates();
    assert!(
        dups.is_empty(),
        "CHAOS_SEED={seed}: Jobs created twice: {dups:#?}"
    );
    // How soon a restarted controller created its first Job (where it had one to create).
    let mut recover: Vec<Duration> = restarts
        .iter()
        .filter_map(|r| Some(ledger.first_after(*r)? - *r))
        .filter(|d| *d < Duration::from_secs(5))
        .collect();
    recover.sort();
    let pct = |p: usize| {
        recover
            .get(recover.len() * p / 100)
            .copied()
            .unwrap_or_default()
    };
    eprintln!(
        "kills: CHAOS_SEED={seed}: {kills} SIGKILLs survived ({} starts) over {waves} waves, {flows_run} flows, {} Jobs, 0 duplicates, {} Jobs adopted by the next process after a kill between their creation and the run state's save, in {:.0?}; restart → first Job created: p50 {:?}, p90 {:?}, max {:?} ({} restarts with work pending)",
        controller.starts,
        ledger.all().len(),
        controller.relaunched_jobs(),
        t0.elapsed(),
        pct(50),
        pct(90),
        recover.last().copied().unwrap_or_default(),
        recover.len()
    );
    assert_eq!(controller.starts, kills + 1);
    controller.kill().await;
}

/// Waits until `file` has at least `n` lines; returns when that was seen.
async fn lines_at_least(file: &std::path::Path, n: usize, secs: u64) -> Instant {
    poll(
        Duration::from_secs(secs),
        &format!("{n} lines in {}", file.display()),
        || async { (lines(file).len() >= n).then(Instant::now) },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_and_etcd_restarted_mid_flow_lose_and_duplicate_nothing() {
    // Every other test of this binary waits: the whole cluster goes away for a moment.
    let _exclusive = cluster_lock().write().await;
    let env = env();
    let client = env.client().await.unwrap();
    let ns = namespace(&client, "chaos-api").await;
    let ledger = Ledger::watch(&client, &ns).await;
    let mut controller = Controller::start("chaos-api", std::slice::from_ref(&ns), None);
    let file = marker_dir(&ns).join("steps.log");
    // `isolate`: a Job per step, so "the controller created the next Job" shows it reconnected
    // (fused steps would share one Job; test 1's flows are fused).
    let steps: Vec<Value> = (1..=10)
        .map(|i| {
            let mut step = exec(format!(
                "sleep 0.5; {}",
                append(&file, &format!("step-{i}"))
            ));
            step["isolate"] = json!(true);
            step
        })
        .collect();
    create_flow(
        &client,
        &ns,
        "long",
        json!({"serviceAccountName": "flow", "steps": steps}),
    )
    .await;

    let mut figures = Vec::new();
    for (component, after) in [(Component::ApiServer, 2), (Component::Etcd, 6)] {
        lines_at_least(&file, after, 120).await;
        let before = lines(&file).len();
        let down_at = Instant::now();
        let ready_after = env
            .restart_component(component, Duration::from_secs(3))
            .await
            .unwrap();
        let ready_at = Instant::now();
        // The flow moves on by itself: the controller creates the next Job (its part), then
        // the step runs and appends its line (kube-controller-manager, the scheduler and the
        // kubelet reconnected too). Polled every 100 ms, not watched: a watch would itself be
        // reconnecting.
        let client = env.client().await.unwrap();
        let jobs_before = common::jobs(&client, &ns).await.len();
        let (mut next_job, mut moved) = (None, None);
        let deadline = Instant::now() + Duration::from_secs(90);
        while moved.is_none() || next_job.is_none() {
            assert!(
                Instant::now() < deadline,
                "{}: the flow did not move on within 90 s",
                component.name()
            );
            if next_job.is_none() && common::jobs(&client, &ns).await.len() > jobs_before {
                next_job = Some(ready_at.elapsed());
            }
            if moved.is_none() && lines(&file).len() > before {
                moved = Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let moved = moved.unwrap();
        let next_job = next_job.unwrap();
        // Retrying its watches every 2 s at most (backoff::WatchBackoff), the controller is back
        // at work within a few seconds; kube's default backoff took up to 30 s.
        assert!(
            next_job < Duration::from_secs(10),
            "{}: the controller created its next Job {next_job:?} after the API server was ready",
            component.name()
        );
        let next_job = format!("{next_job:.1?}");
        controller.assert_running(&format!("after restarting {}", component.name()));
        figures.push(format!(
            "{}: down 3 s, ready {:.1?} after start; next Job created {next_job} and next step done {:.1?} after ready ({:.1?} after the kill)",
            component.name(),
            ready_after,
            moved.saturating_duration_since(ready_at),
            moved - down_at
        ));
    }
    let client = env.client().await.unwrap();
    let status = common::wait_done(&client, &ns, "long", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    controller.assert_running("at the end");
    assert_eq!(controller.starts, 1, "the controller was never restarted");
    let want: Vec<String> = (1..=10).map(|i| format!("step-{i}")).collect();
    assert_lines_once(&file, &want, "long");
    ledger.sweep(&client, &ns).await;
    let dups = ledger.duplicates();
    assert!(dups.is_empty(), "Jobs created twice: {dups:#?}");
    assert_eq!(ledger.all().len(), 10, "one Job per step");
    assert_status_agrees_with_jobs(&client, &ns, "long", &status).await;
    eprintln!("api/etcd: {}", figures.join("; "));
    controller.kill().await;
}

fn node_ready(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_dying_mid_step_fails_the_step_naming_it_and_stops_the_rollout() {
    let _shared = cluster_lock().read().await;
    let env = env();
    let client = env.client().await.unwrap();
    let ns = namespace(&client, "chaos-node").await;
    let ledger = Ledger::watch(&client, &ns).await;
    let mut controller = Controller::start("chaos-node", std::slice::from_ref(&ns), None);
    let file = marker_dir(&ns).join("rolled.log");
    let timeout = 10u64;
    // Healthy, each node's step takes 6 s of its 10 s; edge-0 dies during it.
    create_flow(&client, &ns, "edge", json!({"serviceAccountName": "flow", "steps": [
        {"type": "loopNodes", "selector": EDGE_LABEL, "maxParallel": 1, "steps": [
            {"type": "execNode", "timeoutSeconds": timeout, "cmd": format!("echo ${{node}} >> {}; sleep 6", file.display())}
        ]}
    ]}))
    .await;
    let started = lines_at_least(&file, 1, 90).await;
    assert_eq!(lines(&file), ["edge-0"]);
    let killed = env.stop_node("edge-0");
    assert_eq!(killed, 1, "the step's process died with the node");

    let status = common::wait_done(&client, &ns, "edge", 120).await;
    let failed_after = started.elapsed();
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("edge-0"),
        "the message names the node: {message}"
    );
    // Bounded by the step's timeout plus the grace the executor has to report its own timeout
    // (the Job's activeDeadlineSeconds), plus a few seconds for the Job controller.
    let bound = Duration::from_secs(timeout + u64::from(DEADLINE_GRACE_SECONDS) + 15);
    assert!(
        failed_after <= bound,
        "the step failed {failed_after:?} after it started, not within {bound:?}"
    );
    assert_eq!(
        lines(&file),
        ["edge-0"],
        "the rollout stopped: edge-1 never ran"
    );
    let pinned = common::pinned_nodes(&client, &ns).await;
    assert!(
        !pinned.iter().any(|n| n == "edge-1"),
        "no Job for edge-1: {pinned:?}"
    );
    assert_status_agrees_with_jobs(&client, &ns, "edge", &status).await;
    assert!(ledger.duplicates().is_empty(), "{:#?}", ledger.duplicates());

    // The node-lifecycle controller marks the dead node NotReady (Unknown) once its grace period
    // (50 s) passes without heartbeats.
    let nodes: Api<Node> = Api::all(client.clone());
    let not_ready = poll(Duration::from_secs(90), "edge-0 NotReady", || async {
        let n = nodes.get("edge-0").await.ok()?;
        (node_ready(&n).as_deref() != Some("True")).then(Instant::now)
    })
    .await;
    // The node comes back: Ready again, its dead pod reported failed.
    env.start_node("edge-0").await.unwrap();
    poll(Duration::from_secs(30), "edge-0 Ready again", || async {
        let n = nodes.get("edge-0").await.ok()?;
        (node_ready(&n).as_deref() == Some("True")).then_some(())
    })
    .await;
    controller.assert_running("at the end");
    eprintln!(
        "node death: step failed {failed_after:.1?} after it started (timeout {timeout} s + {DEADLINE_GRACE_SECONDS} s grace); node NotReady {:.1?} after it died; message: {message}",
        not_ready - started
    );
    controller.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_step_without_a_timeout_fails_once_its_node_is_lost_and_never_reruns() {
    let _shared = cluster_lock().read().await;
    let env = env();
    let client = env.client().await.unwrap();
    let ns = namespace(&client, "chaos-node-back").await;
    let ledger = Ledger::watch(&client, &ns).await;
    let mut controller = Controller::start("chaos-node-back", std::slice::from_ref(&ns), None);
    let file = marker_dir(&ns).join("ran.log");
    // No timeoutSeconds: the Job has no deadline. Healthy, the step takes 8 s.
    create_flow(
        &client,
        &ns,
        "no-timeout",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "execNode", "nodeSelector": "kubernetes.io/hostname=edge-1",
             "cmd": format!("echo ran >> {}; sleep 8", file.display())}
        ]}),
    )
    .await;
    let started = lines_at_least(&file, 1, 90).await;
    assert_eq!(
        env.stop_node("edge-1"),
        1,
        "the step's process died with the node"
    );
    // Nothing reports the pod's end any more; the step fails once the node-lifecycle
    // controller marks the node Unknown (its grace period: about 45 s without heartbeats).
    let status = common::wait_done(&client, &ns, "no-timeout", 120).await;
    let failed_after = started.elapsed();
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("node edge-1 is NotReady"),
        "the message names the node and why: {message}"
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = node_ready(&nodes.get("edge-1").await.unwrap());
    assert_eq!(
        ready.as_deref(),
        Some("Unknown"),
        "failed because the node was lost, not before"
    );
    assert!(
        failed_after < Duration::from_secs(90),
        "failed {failed_after:?} after the step started"
    );
    // Its Job is deleted, so the node does not run it again when it comes back.
    poll(
        Duration::from_secs(30),
        "the lost node's Job deleted",
        || async {
            common::pinned_nodes(&client, &ns)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    let back = Instant::now();
    env.start_node("edge-1").await.unwrap();
    poll(Duration::from_secs(30), "edge-1 Ready again", || async {
        let n = nodes.get("edge-1").await.ok()?;
        (node_ready(&n).as_deref() == Some("True")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(lines(&file), ["ran"], "the step did not run again");
    let after = status_of(&client, &ns, "no-timeout").await.unwrap();
    assert_eq!(after["phase"], "Failed", "{after:#}");
    assert_eq!(after["message"], status["message"], "the verdict stands");
    assert!(ledger.duplicates().is_empty(), "{:#?}", ledger.duplicates());
    controller.assert_running("at the end");
    eprintln!(
        "node lost: a step without timeout failed {failed_after:.1?} after it started (node back {:.1?} later); message: {message}",
        back.elapsed()
    );
    controller.kill().await;
}

async fn lease_holder(
    client: &Client,
    ns: &str,
) -> Option<(String, Option<k8s_openapi::jiff::Timestamp>)> {
    let spec = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt("pseudoflow-controller")
        .await
        .ok()??
        .spec?;
    Some((spec.holder_identity?, spec.renew_time.map(|t| t.0)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkilled_mid_run_hands_over_within_the_lease() {
    let _shared = cluster_lock().read().await;
    let env = env();
    let client = env.client().await.unwrap();
    let ns = namespace(&client, "chaos-leader").await;
    let ledger = Ledger::watch(&client, &ns).await;
    let nss = std::slice::from_ref(&ns);
    let mut a = Controller::start("chaos-leader-a", nss, Some(&ns));
    poll(Duration::from_secs(30), "a leads", || async {
        let (h, _) = lease_holder(&client, &ns).await?;
        h.starts_with("chaos-leader-a-").then_some(())
    })
    .await;
    let mut b = Controller::start("chaos-leader-b", nss, Some(&ns));
    let file = marker_dir(&ns).join("steps.log");
    let steps: Vec<Value> = (1..=8)
        .map(|i| {
            exec(format!(
                "sleep 0.5; {}",
                append(&file, &format!("step-{i}"))
            ))
        })
        .collect();
    create_flow(
        &client,
        &ns,
        "handover",
        json!({"serviceAccountName": "flow", "steps": steps}),
    )
    .await;
    lines_at_least(&file, 2, 90).await;

    let (_, renewed) = lease_holder(&client, &ns).await.unwrap();
    a.kill().await;
    let killed = Instant::now();
    let killed_ts = k8s_openapi::jiff::Timestamp::now();
    let holder = poll(Duration::from_secs(40), "b takes over", || async {
        let (h, _) = lease_holder(&client, &ns).await?;
        h.starts_with("chaos-leader-b-").then_some(h)
    })
    .await;
    let takeover = killed.elapsed();
    // The controller's Lease: 15 s, renewed every 5 s, candidates retry every 2 s. b may take
    // it only once a's last renewal is 15 s old, and does within one retry of that.
    let renewed = renewed.expect("a renewed the Lease");
    let expiry_after_kill = renewed.as_second() + 15 - killed_ts.as_second();
    assert!(
        takeover
            >= Duration::from_secs(expiry_after_kill.max(0) as u64)
                .saturating_sub(Duration::from_secs(1)),
        "b took over {takeover:?} after the kill, before a's Lease expired ({expiry_after_kill} s)"
    );
    assert!(
        takeover <= Duration::from_secs(15 + 2 + 1),
        "b took over {takeover:?} after the kill: more than the Lease duration (15 s) plus a retry (2 s)"
    );
    let status = common::wait_done(&client, &ns, "handover", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    b.assert_running("the new leader");
    let want: Vec<String> = (1..=8).map(|i| format!("step-{i}")).collect();
    assert_lines_once(&file, &want, "handover");
    ledger.sweep(&client, &ns).await;
    let dups = ledger.duplicates();
    assert!(dups.is_empty(), "Jobs created twice: {dups:#?}");
    assert_status_agrees_with_jobs(&client, &ns, "handover", &status).await;
    eprintln!("leader: {holder} took over {takeover:.1?} after the leader was SIGKILLed (its Lease ran {expiry_after_kill} s more)");
    b.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_sigkilled_during_on_delete_keeps_the_finalizer_and_runs_them_once() {
    let _shared = cluster_lock().read().await;
    let env = env();
    let client = env.client().await.unwrap();
    let (mut rng, seed) = Rng::from_env("on-delete");
    let ns = namespace(&client, "chaos-ondel").await;
    let ledger = Ledger::watch(&client, &ns).await;
    let mut controller = Controller::start("chaos-ondel", std::slice::from_ref(&ns), None);
    let file = marker_dir(&ns).join("steps.log");
    // Six onDelete steps of about 2 s each: the three kills below all land during them.
    let on_delete: Vec<Value> = (1..=6)
        .map(|i| exec(format!("sleep 1; {}", append(&file, &format!("od-{i}")))))
        .collect();
    create_flow(
        &client,
        &ns,
        "db",
        json!({"serviceAccountName": "flow",
        "steps": [exec(append(&file, "main"))], "onDelete": on_delete}),
    )
    .await;
    let status = common::wait_done(&client, &ns, "db", 90).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let api = flows(&client, &ns);
    let uid = api.get("db").await.unwrap().metadata.uid.unwrap();
    api.delete("db", &DeleteParams::default()).await.unwrap();

    let mut kills_during = 0;
    for _ in 0..3 {
        tokio::time::sleep(rng.millis(100, 1500)).await;
        controller.kill().await;
        // With no controller, nothing may remove the finalizer: the flow stays, being deleted.
        let Some(flow) = api.get_opt("db").await.unwrap() else {
            break;
        };
        assert!(flow.metadata.deletion_timestamp.is_some());
        assert!(
            flow.metadata
                .finalizers
                .unwrap_or_default()
                .contains(&"ops.example.com/on-delete".to_string()),
            "CHAOS_SEED={seed}: the finalizer stays while the controller is down"
        );
        kills_during += 1;
        tokio::time::sleep(rng.millis(0, 1000)).await;
        let still = api.get_opt("db").await.unwrap();
        assert!(
            still.is_some(),
            "CHAOS_SEED={seed}: the flow went while no controller ran"
        );
        controller.restart();
    }
    assert!(
        kills_during >= 1,
        "CHAOS_SEED={seed}: no kill landed during onDelete"
    );
    common::wait_gone(&client, &ns, "db", &uid, 90).await;
    let mut want = vec!["main".to_string()];
    want.extend((1..=6).map(|i| format!("od-{i}")));
    assert_lines_once(&file, &want, "db");
    ledger.sweep(&client, &ns).await;
    let dups = ledger.duplicates();
    assert!(
        dups.is_empty(),
        "CHAOS_SEED={seed}: Jobs created twice: {dups:#?}"
    );
    eprintln!("on-delete: CHAOS_SEED={seed}: {kills_during} SIGKILLs during onDelete; every onDelete step ran once");
    controller.kill().await;
}

/// The step of a widget flow's revision `rev`: ConfigMap `<widget>-rev<rev>` holding `rev`.
fn revision_step(rev: u32) -> Value {
    json!([{"type": "apply", "name": "rev", "manifests": format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${{object.metadata.name}}-rev{rev}\ndata:\n  rev: \"{rev}\"\n")}])
}

/// The widgets whose served mark of flow `widgets` names revision `hash`.
async fn widgets_on(client: &Client, ns: &str, hash: &str) -> std::collections::BTreeSet<String> {
    let key = pseudoflow_controller::bind::served::mark_key(ns, "widgets");
    let all = bound::widgets(client, ns)
        .list(&Default::default())
        .await
        .unwrap();
    all.items
        .into_iter()
        .filter(|w| {
            let a = w.metadata.annotations.clone().unwrap_or_default();
            let mark: Option<Value> = a.get(&key).and_then(|m| serde_json::from_str(m).ok());
            mark.is_some_and(|m| m["v"] == hash)
        })
        .filter_map(|w| w.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_sigkilled_mid_rollout_goes_on_where_it_was() {
    let _shared = cluster_lock().read().await;
    let client = env().client().await.unwrap();
    let (mut rng, seed) = Rng::from_env("rollout");
    install_crd(&client).await;
    common::apply(&client, bound::widget().crd()).await;
    let ns = FlowNamespace::new("chaos-rollout")
        .rules(bound::flow_rules(bound::all_verbs()))
        .create(env(), &client)
        .await;
    bound::wait_served(&client, &ns).await;
    let mut controller = Controller::start("chaos-rollout", std::slice::from_ref(&ns), None);
    let mut flow = bound::widget_flow(json!({"record": "Object"}));
    flow.as_object_mut().unwrap().remove("onDelete");
    flow["rollout"] = json!({"waves": [1, "50%"], "minReadySeconds": 3});
    flow["steps"] = revision_step(1);
    create_flow(&client, &ns, "widgets", flow).await;
    let names: Vec<String> = (0..20).map(|i| format!("w-{i:02}")).collect();
    for n in &names {
        bound::create_widget(&client, &ns, n, json!({"version": "one"})).await;
    }
    common::wait_status(&client, &ns, "widgets", 120, "revision 1 everywhere", |s| {
        s["bound"]["rollout"]["phase"] == "Completed" && s["bound"]["rollout"]["updated"] == 20
    })
    .await;
    let patch = json!({"spec": {"steps": revision_step(2)}});
    let pp = kube::api::PatchParams::default();
    flows(&client, &ns)
        .patch("widgets", &pp, &kube::api::Patch::Merge(&patch))
        .await
        .unwrap();
    // Killed once the second wave is under way (the first held 3 s by minReadySeconds).
    let st = common::wait_status(&client, &ns, "widgets", 90, "wave 2 under way", |s| {
        let r = &s["bound"]["rollout"];
        r["revision"] == s["bound"]["currentRevision"] && r["wave"] == 2
    })
    .await;
    let second = st["bound"]["currentRevision"].as_str().unwrap().to_string();
    let hash = second.rsplit('-').next().unwrap().to_string();
    tokio::time::sleep(rng.millis(0, 1500)).await;
    controller.kill().await;
    let at_kill = widgets_on(&client, &ns, &hash).await;
    assert!(at_kill.contains("w-00"), "CHAOS_SEED={seed}: {at_kill:?}");
    tokio::time::sleep(rng.millis(500, 2000)).await;
    assert_eq!(
        widgets_on(&client, &ns, &hash).await,
        at_kill,
        "nothing moves while it is down"
    );
    controller.restart();
    // From where it was: no object on revision 2 goes back, and the status never shows an
    // earlier wave than the one under way at the kill.
    let mut seen = at_kill.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let now = widgets_on(&client, &ns, &hash).await;
        assert!(
            now.is_superset(&seen),
            "CHAOS_SEED={seed}: {seen:?} then {now:?}"
        );
        seen = now;
        let f = flows(&client, &ns).get("widgets").await.unwrap();
        let r = &f.data["status"]["bound"]["rollout"];
        assert!(r["wave"].as_u64() >= Some(2), "CHAOS_SEED={seed}: {r:#}");
        if r["phase"] == "Completed" && r["updated"] == 20 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "CHAOS_SEED={seed}: not completed: {r:#}; see {}",
            controller.log().display()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(seen.len(), 20);
    // In waves, in name order, across the kill: what each wrote, ordered by resourceVersion.
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    let mut at = Vec::new();
    for n in &names {
        let c = cm.get(&format!("{n}-rev2")).await.unwrap();
        at.push(c.metadata.resource_version.unwrap().parse::<u64>().unwrap());
    }
    assert!(at[..1].iter().max() < at[1..10].iter().min(), "{at:?}");
    assert!(at[1..10].iter().max() < at[10..].iter().min(), "{at:?}");
    eprintln!("rollout: CHAOS_SEED={seed}: killed at wave 2 with {} objects on the new revision; completed after the restart", at_kill.len());
    controller.kill().await;
}

/// A namespace for tests 7 and 8: widgets bound to flow `widgets` (recorded in its objects,
/// running `steps`), whose ServiceAccount may exec into pod `shell` (a server that runs until
/// killed, with a shell and `sleep`), and a controller holding its approval key. Returns the
/// namespace, the file the commands append to and the controller.
async fn exec_in_pod_setup(
    client: &Client,
    prefix: &str,
    steps: impl FnOnce(&std::path::Path) -> Value,
) -> (String, std::path::PathBuf, Controller) {
    install_crd(client).await;
    common::apply(client, bound::widget().crd()).await;
    let mut rules = bound::flow_rules(bound::all_verbs());
    rules.as_array_mut().unwrap().extend([
        json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}),
        json!({"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]}),
        json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["watch"]}),
    ]);
    let ns = FlowNamespace::new(prefix)
        .rules(rules)
        .create(env(), client)
        .await;
    bound::wait_served(client, &ns).await;
    common::apply(
        client,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shell", "namespace": ns},
            "spec": {"containers": [{"name": "db", "image": common::MYSQL_IMAGE,
                "env": [{"name": "MYSQL_ROOT_PASSWORD", "value": "unused"}]}]}}),
    )
    .await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    poll(Duration::from_secs(90), "the shell pod runs", || async {
        let p = pods.get("shell").await.ok()?;
        let phase = p.status?.phase?;
        (phase == "Running").then_some(())
    })
    .await;
    let file = marker_dir(&ns).join("commands.log");
    let controller = Controller::start_with_key(prefix, std::slice::from_ref(&ns), &ns);
    let mut flow = bound::widget_flow(json!({"record": "Object"}));
    flow.as_object_mut().unwrap().remove("onDelete");
    flow["steps"] = steps(&file);
    create_flow(client, &ns, "widgets", flow).await;
    (ns, file, controller)
}

/// How many widgets of `ns` carry annotation `key`.
async fn widgets_annotated(client: &Client, ns: &str, key: &str) -> Option<usize> {
    let all = bound::widgets(client, ns)
        .list(&Default::default())
        .await
        .ok()?;
    let has = |w: &&kube::api::DynamicObject| {
        w.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(key))
    };
    Some(all.items.iter().filter(has).count())
}

/// Test 7: a flow recorded in its objects runs a command in another pod (`exec` with `pod`: not
/// safe to repeat, run by the controller under each object's sealed progress record), then waits.
/// The controller is SIGKILLed while every run waits, and started again: each run resumes after
/// the command, which ran exactly once per object; the record is gone once the run ends.
/// Without the record the new process would run each object again from its first step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_sigkilled_after_an_objects_command_resumes_its_run_and_never_repeats_it() {
    let _shared = cluster_lock().read().await;
    let client = env().client().await.unwrap();
    let (ns, file, mut controller) = exec_in_pod_setup(&client, "chaos-once", |file| {
        json!([
            {"type": "exec", "name": "the command", "pod": "shell", "container": "db",
                "cmd": append(file, "ran-${ object.metadata.name | shq }")},
            {"type": "waitFor", "name": "go", "resource": {"kind": "ConfigMap", "name": "go"},
                "condition": "Exist", "timeoutSeconds": 300},
            {"type": "apply", "name": "done", "manifests":
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-done\n"}
        ])
    })
    .await;
    let names: Vec<String> = (0..3).map(|i| format!("w-{i}")).collect();
    for n in &names {
        bound::create_widget(&client, &ns, n, json!({"version": "one"})).await;
    }
    let progress = pseudoflow_controller::bind::served::progress_key(&ns, "widgets");
    let mark = pseudoflow_controller::bind::served::mark_key(&ns, "widgets");
    // Each run waits for `go`, its command ended and kept as ended: a run still going 2 s after
    // it started shows `Creating`, and the command and its record's two writes take
    // milliseconds before the wait.
    poll(
        Duration::from_secs(90),
        "every command ran, its run waits",
        || async {
            let kept = widgets_annotated(&client, &ns, &progress).await?;
            for n in &names {
                let status = bound::widget_status(&client, &ns, n).await;
                if status["phase"] != "Creating" {
                    return None;
                }
            }
            (lines(&file).len() == 3 && kept == 3).then_some(())
        },
    )
    .await;
    controller.kill().await;
    controller.restart();
    common::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "go", "namespace": ns}}),
    )
    .await;
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    poll(
        Duration::from_secs(120),
        "every run ended, its progress record gone",
        || async {
            for n in &names {
                maps.get_opt(&format!("{n}-done")).await.ok()??;
            }
            let kept = widgets_annotated(&client, &ns, &progress).await?;
            let marked = widgets_annotated(&client, &ns, &mark).await?;
            (kept == 0 && marked == 3).then_some(())
        },
    )
    .await;
    let want: Vec<String> = names.iter().map(|n| format!("ran-{n}")).collect();
    assert_lines_once(&file, &want, "widgets");
    controller.assert_running("after the runs resumed");
    controller.kill().await;
}

/// Test 8: the controller is SIGKILLed while an object's command in another pod runs. The new
/// process finds the command begun and never ended in the object's progress record: it may have
/// run, so the step fails, saying so, and is never run again (no retry either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_sigkilled_during_an_objects_command_fails_it_and_never_runs_it_again() {
    let _shared = cluster_lock().read().await;
    let client = env().client().await.unwrap();
    let (ns, file, mut controller) = exec_in_pod_setup(&client, "chaos-cut", |file| {
        let cmd = format!(
            "{}; sleep 4",
            append(file, "began-${ object.metadata.name | shq }")
        );
        json!([{"type": "exec", "name": "a long command", "pod": "shell", "container": "db",
            "cmd": cmd}])
    })
    .await;
    bound::create_widget(&client, &ns, "w-cut", json!({"version": "one"})).await;
    poll(Duration::from_secs(90), "the command began", || async {
        (lines(&file).len() == 1).then_some(())
    })
    .await;
    controller.kill().await;
    controller.restart();
    let failed = poll(
        Duration::from_secs(90),
        "the cut command failed",
        || async {
            let status = bound::widget_status(&client, &ns, "w-cut").await;
            (status["phase"] == "Failed").then(|| status.to_string())
        },
    )
    .await;
    assert!(
        failed.contains(
            "spec.steps[0]: the controller stopped while this step ran; it is not run again"
        ),
        "{failed}"
    );
    assert!(
        failed.contains("not retried"),
        "no retry runs it again: {failed}"
    );
    // Longer than the command and than a first retry's backoff (10 s): it began once.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_lines_once(&file, &["began-w-cut".to_string()], "w-cut");
    controller.assert_running("after the cut command failed");
    controller.kill().await;
}
