//! Benchmark 3: a node fan-out over 100 simulated nodes. On every node a `configFile`, a
//! `patchFile` and an `execNode` (`systemctl restart kubelet`), `maxParallel` 10 and 100 —
//! driven by the PseudoFlow controller (`loopNodes`), and side by side by the shell loop an
//! operator would write without it: per node, `kubectl apply` + `kubectl wait` of one Job per
//! step (the executor's own Jobs, each step lowered on its own, so this baseline stays one Job
//! per step whatever the compiler fuses), `xargs -P` nodes at a time. Every run is checked on
//! every node: the file written, the flag patched, one more kubelet restart recorded.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::Client;
use pseudoflow_compiler::emit::{emit_node, to_yaml};
use pseudoflow_compiler::lower::{task_of, FlowRef, LowerOptions};
use pseudoflow_compiler::plan::NodeKind;
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_test_support::FlowNamespace;
use pseudoflow_testenv::kubelet::{self, ImageMap, KubeletConfig};
use pseudoflow_testenv::{apply, NodeSpec, TestEnv};
use serde_json::{json, Value};

use crate::common::{self, JobCounter, Row, IMAGE};
use crate::process;

const CONTENT: &str = "nameserver 169.254.20.10\n";
const FLAGS: &str = "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock --resolv-conf=/run/systemd/resolve/resolv.conf\"\n";
const PATCHED: &str = "--resolv-conf=/etc/pfbench/resolv.conf";

/// The three node steps, for files named after `tag`.
fn node_steps(tag: &str) -> [Value; 3] {
    [
        json!({"type": "configFile", "path": format!("/etc/pfbench/{tag}.conf"), "content": CONTENT}),
        json!({"type": "patchFile", "path": format!("/etc/pfbench/{tag}.env"), "pattern": "--resolv-conf=[^\" ]*", "replace": PATCHED, "createIfMissing": false}),
        json!({"type": "execNode", "cmd": "systemctl restart kubelet"}),
    ]
}

fn loop_spec(steps: &[Value], max_parallel: usize) -> Value {
    json!({"serviceAccountName": "flow", "steps": [{
        "type": "loopNodes", "selector": "", "maxParallel": max_parallel, "steps": steps,
    }]})
}

/// Registers simulated worker nodes until the cluster has `total`, on this runtime, the way
/// testenv registered the first ones (same CA, streaming certificate and node directories).
pub async fn grow_cluster(env: &TestEnv, client: &Client, total: usize, step: &Path) {
    let have = env.nodes().len();
    if have >= total {
        return;
    }
    let kc = std::fs::read_to_string(env.kubeconfig_path()).unwrap();
    let api_port: u16 = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://127.0.0.1:"))
        .expect("testenv kubeconfig names https://127.0.0.1:<port>")
        .parse()
        .unwrap();
    let pki = env.dir().join("pki");
    let mut images = ImageMap::default();
    images.insert_runtime(IMAGE, step);
    images.insert(pseudoflow_testenv::SHELL_IMAGE, "/bin/sh");
    let cfg = KubeletConfig {
        api_port,
        ca_crt: pki.join("ca.crt"),
        serving_crt: pki.join("kubelet.crt"),
        serving_key: pki.join("kubelet.key"),
        nodes_dir: env.dir().join("nodes"),
        images: Arc::new(images),
    };
    // The default cluster is cp-0, worker-0, worker-1: continue the workers' numbering.
    let workers = have - 1;
    let specs: Vec<NodeSpec> = (workers..total - 1)
        .map(|i| NodeSpec::worker(&format!("worker-{i}")))
        .collect();
    let t = Instant::now();
    kubelet::start(client.clone(), cfg, &specs).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    loop {
        let ready = nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|n| pseudoflow_testenv::env::node_ready(n))
            .count();
        if ready >= total {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "{ready}/{total} nodes Ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "cluster grown to {total} simulated nodes in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

async fn node_names(client: &Client) -> Vec<String> {
    let mut nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    nodes.sort();
    nodes
}

/// Puts the file `patchFile` edits on every node; returns each node's kubelet restarts so far.
fn prepare_nodes(env: &TestEnv, nodes: &[String], tag: &str) -> Vec<usize> {
    for node in nodes {
        let dir = env.node_root(node).join("etc/pfbench");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{tag}.env")), FLAGS).unwrap();
    }
    nodes.iter().map(|n| restarts(env, n)).collect()
}

fn restarts(env: &TestEnv, node: &str) -> usize {
    env.node_calls(node)
        .iter()
        .filter(|c| {
            c.split_once(' ')
                .is_some_and(|(_, cmd)| cmd == "systemctl restart kubelet")
        })
        .count()
}

/// Every node has the file, the patched flag and one more kubelet restart than in `before`.
fn check_nodes(env: &TestEnv, nodes: &[String], tag: &str, before: &[usize]) {
    for (node, had) in nodes.iter().zip(before) {
        let root = env.node_root(node).join("etc/pfbench");
        let conf = std::fs::read_to_string(root.join(format!("{tag}.conf"))).ok();
        assert_eq!(conf.as_deref(), Some(CONTENT), "{node}: {tag}.conf");
        let flags = std::fs::read_to_string(root.join(format!("{tag}.env"))).unwrap();
        assert!(flags.contains(PATCHED), "{node}: {tag}.env: {flags}");
        assert_eq!(
            restarts(env, node),
            had + 1,
            "{node}: kubelet restarts; calls: {:#?}",
            env.node_calls(node)
        );
    }
}

/// Node steps need the namespace opted in: labelled privileged (and allow-listed in the
/// controller); the ServiceAccount may list nodes.
async fn namespace(env: &TestEnv, client: &Client, prefix: &str) -> String {
    let ns = FlowNamespace::new(prefix)
        .cluster_rules(
            json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]),
        )
        .create(env, client)
        .await;
    let label = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}});
    apply::apply_value(client, label, None).await.unwrap();
    ns
}

async fn run_pseudoflow(
    env: &TestEnv,
    client: &Client,
    nodes: &[String],
    max_parallel: usize,
) -> (Duration, usize) {
    let ns = namespace(env, client, &format!("fanout-pf-{max_parallel}")).await;
    let ctl = process::in_process(client, IMAGE, &ns, true);
    let counter = JobCounter::start(client, &ns).await;
    let tag = format!("pseudoflow-{max_parallel}");
    let before = prepare_nodes(env, nodes, &tag);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    apply::apply_value(client, json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {"name": "fanout", "namespace": ns}, "spec": loop_spec(&node_steps(&tag), max_parallel)}), None).await.unwrap();
    common::wait_succeeded(client, &ns, "fanout", 1800).await;
    let took = t.elapsed();
    ctl.abort();
    check_nodes(env, nodes, &tag, &before);
    (took, counter.of_flow("fanout"))
}

/// Per node, one shell script: `kubectl apply` + `kubectl wait` of each step's Job in turn;
/// `xargs -P max_parallel` across nodes.
async fn run_kubectl(
    env: &TestEnv,
    client: &Client,
    nodes: &[String],
    max_parallel: usize,
    dir: &Path,
) -> (Duration, usize) {
    let ns = namespace(env, client, &format!("fanout-kubectl-{max_parallel}")).await;
    let counter = JobCounter::start(client, &ns).await;
    let tag = format!("kubectl-{max_parallel}");
    let dir = dir.join(&tag);
    std::fs::create_dir_all(&dir).unwrap();
    let kubectl = common::kubectl();
    let kc = env.kubeconfig_path().display().to_string();
    // Each step compiled as a flow of its own: one Job per step and node, fused or not.
    let lowered_steps: Vec<_> = node_steps(&tag)
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let name = format!("fanout-{i}");
            let compiled = compile(
                &FlowId {
                    name: &name,
                    namespace: Some(&ns),
                },
                &loop_spec(std::slice::from_ref(step), max_parallel),
            )
            .unwrap();
            let ids: Vec<String> = compiled
                .plan
                .nodes()
                .filter(|n| n.kind == NodeKind::Action && task_of(n).is_some())
                .map(|n| n.id.clone())
                .collect();
            assert_eq!(ids.len(), 1, "one Job-running node for {step}: {ids:?}");
            let flow = FlowRef {
                name,
                namespace: ns.clone(),
                uid: String::new(),
                service_account: "flow".into(),
            };
            (compiled, flow, ids[0].clone())
        })
        .collect();
    for node in nodes {
        // `kubectl wait` reads through the API server's watch cache and can miss a Job created
        // a moment ago ("NotFound") under load, as an operator's loop would: retry that only.
        let mut script = format!(
            "set -e\nwait_job() {{ for i in $(seq 50); do out=$({k} --kubeconfig {kc} wait -n {ns} --for=condition=complete --timeout=600s job/$1 2>&1) && return 0; case \"$out\" in *NotFound*) sleep 0.2;; *) echo \"$out\" >&2; return 1;; esac; done; echo \"$out\" >&2; return 1; }}\n",
            k = kubectl.display()
        );
        for (compiled, flow, id) in &lowered_steps {
            let mut lowered = emit_node(
                compiled,
                flow,
                id,
                node,
                &LowerOptions {
                    image: IMAGE.into(),
                    ..Default::default()
                },
            )
            .unwrap();
            lowered.input.metadata.owner_references = None;
            lowered.job.metadata.owner_references = None;
            let name = lowered.job.metadata.name.clone().unwrap();
            let file = dir.join(format!("{name}.yaml"));
            std::fs::write(&file, to_yaml(&lowered)).unwrap();
            writeln!(
                script,
                "{k} --kubeconfig {kc} apply -f {f} >/dev/null\nwait_job {name}",
                k = kubectl.display(),
                f = file.display()
            )
            .unwrap();
        }
        std::fs::write(dir.join(format!("{node}.sh")), script).unwrap();
    }
    let before = prepare_nodes(env, nodes, &tag);
    let t = Instant::now();
    let status = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ls {d}/*.sh | xargs -P {max_parallel} -n 1 bash",
            d = dir.display()
        ))
        .status()
        .await
        .unwrap();
    let took = t.elapsed();
    assert!(status.success(), "the kubectl loop failed");
    check_nodes(env, nodes, &tag, &before);
    (took, counter.total())
}

pub async fn run(env: &TestEnv, client: &Client, dir: &Path, parallelism: &[usize]) -> Vec<Row> {
    let nodes = node_names(client).await;
    let mut rows = Vec::new();
    for &mp in parallelism {
        let (pf, pf_jobs) = run_pseudoflow(env, client, &nodes, mp).await;
        let (kc, kc_jobs) = run_kubectl(env, client, &nodes, mp, dir).await;
        println!(
            "fan-out maxParallel {mp}: PseudoFlow {:.1} s ({pf_jobs} Jobs), kubectl loop {:.1} s ({kc_jobs} Jobs)",
            pf.as_secs_f64(),
            kc.as_secs_f64()
        );
        let w = format!(
            "3. configFile + patchFile + execNode on {} nodes, maxParallel {mp}",
            nodes.len()
        );
        rows.push(Row {
            workload: w.clone(),
            driver: "PseudoFlow, `loopNodes`".into(),
            wall: common::secs(pf),
            jobs: pf_jobs.to_string(),
            ratio: "1.00×".into(),
            notes: "1 run; every node's file, flag and kubelet restart checked".into(),
        });
        rows.push(Row {
            workload: w,
            driver: format!("`kubectl apply` + `wait` per step, `xargs -P {mp}` over nodes"),
            wall: common::secs(kc),
            jobs: kc_jobs.to_string(),
            ratio: common::ratio(pf, kc),
            notes: "1 run; the executor's Jobs, one per step and node; same checks".into(),
        });
    }
    rows
}
