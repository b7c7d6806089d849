//! `cargo bench -p pseudoflow-controller --bench fanout`: a node fan-out on a real control plane
//! (testenv) with 100 simulated nodes. On every node, a `configFile` then an `execNode`
//! (`systemctl restart kubelet`), `maxParallel` 100 and 10 nodes at a time — driven by the
//! PseudoFlow controller (`loopNodes`), and side by side by a plain shell loop an operator would
//! write without it: per node `kubectl apply` + `kubectl wait` of the very same lowered Jobs,
//! `xargs -P` nodes at a time. Both runs are checked: every node's file has the content and every
//! node recorded one more kubelet restart.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;
use pseudoflow_compiler::emit::{emit_node, to_yaml};
use pseudoflow_compiler::lower::{task_of, FlowRef, LowerOptions};
use pseudoflow_compiler::plan::NodeKind;
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::reconcile::flow_resource;
use pseudoflow_controller::{run_controller, Context};
use pseudoflow_test_support::{install_crd, jobs, FlowNamespace};
use pseudoflow_testenv::{apply, Options, TestEnv};
use serde_json::{json, Value};

const NODES: usize = 100;
const IMAGE: &str = "pseudoflow/runtime:bench";
const CONTENT: &str = "bench\n";

fn flow_spec(path: &str, max_parallel: u32) -> Value {
    json!({"serviceAccountName": "flow", "steps": [{
        "type": "loopNodes", "selector": "", "maxParallel": max_parallel, "steps": [
            {"type": "configFile", "path": path, "content": CONTENT},
            {"type": "execNode", "cmd": "systemctl restart kubelet"},
        ]
    }]})
}

/// A namespace whose ServiceAccount `flow` may list nodes (node steps need nothing else).
async fn namespace(env: &TestEnv, client: &Client, prefix: &str) -> String {
    FlowNamespace::new(prefix)
        .cluster_rules(
            json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]),
        )
        .create(env, client)
        .await
}

async fn jobs_in(client: &Client, ns: &str) -> usize {
    jobs(client, ns).await.len()
}

/// Every node has the file and one more recorded kubelet restart than in `before`.
fn check_nodes(env: &TestEnv, nodes: &[String], path: &str, before: &[usize]) {
    for (node, had) in nodes.iter().zip(before) {
        let file = env.node_root(node).join(path.trim_start_matches('/'));
        assert_eq!(
            std::fs::read_to_string(&file).ok().as_deref(),
            Some(CONTENT),
            "{node}: {}",
            file.display()
        );
        let restarts = restarts(env, node);
        assert_eq!(
            restarts,
            had + 1,
            "{node}: kubelet restarts; calls: {:#?}",
            env.node_calls(node)
        );
    }
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

async fn run_pseudoflow(
    env: &TestEnv,
    client: &Client,
    nodes: &[String],
    max_parallel: u32,
) -> (Duration, usize) {
    let ns = namespace(env, client, &format!("pf-{max_parallel}")).await;
    // Node steps need the namespace opted in: labelled privileged and allow-listed.
    let label = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}});
    apply::apply_value(client, label, None).await.unwrap();
    let ctx = Context::new(client.clone(), IMAGE.into(), Arc::new(Metrics::default()))
        .with_node_step_namespaces([ns.clone()].into_iter().collect());
    let ctx = Arc::new(ctx);
    let ctl = tokio::spawn(run_controller(ctx, Some(ns.clone())));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let path = format!("/etc/pfbench/pseudoflow-{max_parallel}.conf");
    let before: Vec<usize> = nodes.iter().map(|n| restarts(env, n)).collect();
    let t0 = Instant::now();
    apply::apply_value(client, json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {"name": "fanout", "namespace": ns}, "spec": flow_spec(&path, max_parallel)}), None).await.unwrap();
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &flow_resource());
    loop {
        let f = flows.get("fanout").await.unwrap();
        match f.data["status"]["phase"].as_str() {
            Some("Succeeded") => break,
            Some("Failed") => panic!("{:#}", f.data["status"]),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let took = t0.elapsed();
    ctl.abort();
    check_nodes(env, nodes, &path, &before);
    (took, jobs_in(client, &ns).await)
}

/// The same Jobs, lowered by the compiler, driven by `kubectl apply` + `kubectl wait` per node
/// and `xargs -P max_parallel` across nodes.
async fn run_kubectl(
    env: &TestEnv,
    client: &Client,
    nodes: &[String],
    max_parallel: u32,
) -> (Duration, usize) {
    let ns = namespace(env, client, &format!("kubectl-{max_parallel}")).await;
    let path = format!("/etc/pfbench/kubectl-{max_parallel}.conf");
    let compiled = compile(
        &FlowId {
            name: "fanout",
            namespace: Some(&ns),
        },
        &flow_spec(&path, max_parallel),
    )
    .unwrap();
    let flow = FlowRef {
        name: "fanout".into(),
        namespace: ns.clone(),
        uid: String::new(),
        service_account: "flow".into(),
    };
    let actions: Vec<String> = compiled
        .plan
        .nodes()
        .filter(|n| n.kind == NodeKind::Action && task_of(n).is_some())
        .map(|n| n.id.clone())
        .collect();
    assert_eq!(actions.len(), 2, "configFile and execNode: {actions:?}");
    let dir = std::env::temp_dir().join(format!(
        "pseudoflow-fanout-{}-{max_parallel}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let kubectl = pseudoflow_testenv::binaries::bin_dir().join("kubectl");
    let kc = env.kubeconfig_path().display().to_string();
    for node in nodes {
        // `kubectl wait` reads through the API server's watch cache and can miss a Job created
        // a moment ago ("NotFound") under load, as an operator's loop would: retry that only.
        let mut script = format!(
            "set -e\nwait_job() {{ for i in $(seq 50); do out=$({k} --kubeconfig {kc} wait -n {ns} --for=condition=complete --timeout=300s job/$1 2>&1) && return 0; case \"$out\" in *NotFound*) sleep 0.2;; *) echo \"$out\" >&2; return 1;; esac; done; echo \"$out\" >&2; return 1; }}\n",
            k = kubectl.display()
        );
        for id in &actions {
            let mut lowered = emit_node(
                &compiled,
                &flow,
                id,
                node,
                &LowerOptions {
                    image: IMAGE.into(),
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
    let before: Vec<usize> = nodes.iter().map(|n| restarts(env, n)).collect();
    let t0 = Instant::now();
    let status = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ls {d}/*.sh | xargs -P {max_parallel} -n 1 bash",
            d = dir.display()
        ))
        .status()
        .await
        .unwrap();
    let took = t0.elapsed();
    assert!(status.success(), "the kubectl loop failed");
    check_nodes(env, nodes, &path, &before);
    (took, jobs_in(client, &ns).await)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let step = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("pseudoflow-step");
    assert!(
        step.is_file(),
        "build it first: cargo build --release -p pseudoflow-runtime --bin pseudoflow-step"
    );
    let mut opts = Options::with_nodes(NODES);
    opts.images.insert_runtime(IMAGE, step);
    let t = Instant::now();
    let env = TestEnv::start(opts).await.unwrap();
    println!(
        "{NODES} simulated nodes Ready in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let mut nodes: Vec<String> = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    nodes.sort();
    assert_eq!(nodes.len(), NODES);

    let mut rows = Vec::new();
    for max_parallel in [100, 10] {
        let (pf, pf_jobs) = run_pseudoflow(&env, &client, &nodes, max_parallel).await;
        let (kc, kc_jobs) = run_kubectl(&env, &client, &nodes, max_parallel).await;
        rows.push((max_parallel, pf, pf_jobs, kc, kc_jobs));
    }
    println!("configFile + execNode on each of {NODES} simulated nodes (testenv, 2 cores), same Jobs, same cluster:");
    println!(
        "| maxParallel | PseudoFlow | Jobs | kubectl apply+wait via xargs -P | Jobs | ratio |"
    );
    println!("|---|---|---|---|---|---|");
    for (mp, pf, pf_jobs, kc, kc_jobs) in rows {
        println!(
            "| {mp} | {:.1} s | {pf_jobs} | {:.1} s | {kc_jobs} | {:.2}x |",
            pf.as_secs_f64(),
            kc.as_secs_f64(),
            pf.as_secs_f64() / kc.as_secs_f64()
        );
    }
}
