//! `cargo bench -p pseudoflow-controller --bench orchestration`: a 50-step sequential flow on a
//! real control plane (testenv). Measures the orchestration gap — a step's Job finishing → the
//! next step's Job created, both as seen by one watch — and the controller's API requests per
//! step, side by side with a `kubectl` loop doing the same 50 Jobs (`kubectl apply` of the very
//! same lowered ConfigMap+Job, then `kubectl wait --for=condition=complete`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::Client;
use pseudoflow_compiler::emit::{emit_node, to_yaml};
use pseudoflow_compiler::lower::{task_of, FlowRef, LowerOptions};
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_controller::flow::flow_resource;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{run_controller, Context};
use pseudoflow_test_support::{install_crd, FlowNamespace};
use pseudoflow_testenv::{apply, Options, TestEnv};
use serde_json::{json, Value};

const STEPS: usize = 50;
const IMAGE: &str = "pseudoflow/runtime:bench";

/// Per Job: when the watch first saw it, and when it saw it Complete.
type Seen = Arc<Mutex<BTreeMap<String, (Instant, Option<Instant>)>>>;

fn watch_jobs(client: Client, ns: &str) -> Seen {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let jobs: Api<Job> = Api::namespaced(client, ns);
    tokio::spawn(async move {
        let mut stream = watcher::watcher(jobs, watcher::Config::default()).boxed();
        while let Some(Ok(ev)) = stream.next().await {
            if let Event::Apply(j) | Event::InitApply(j) = ev {
                let now = Instant::now();
                let name = j.metadata.name.clone().unwrap_or_default();
                let complete = j
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Complete" && c.status == "True")
                    });
                let mut m = s.lock().unwrap();
                let e = m.entry(name).or_insert((now, None));
                if complete && e.1.is_none() {
                    e.1 = Some(now);
                }
            }
        }
    });
    seen
}

/// Gaps (ms) between one Job completing and the next one appearing, in creation order.
fn gaps(seen: &Seen) -> Vec<f64> {
    let m = seen.lock().unwrap();
    let mut jobs: Vec<(Instant, Option<Instant>)> = m.values().cloned().collect();
    jobs.sort_by_key(|(created, _)| *created);
    jobs.windows(2)
        .filter_map(|w| Some(w[1].0.checked_duration_since(w[0].1?)?.as_secs_f64() * 1e3))
        .collect()
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// `isolate`: this bench measures the controller's gap between one Job's end and the next
/// Job's creation, so every step keeps a Job of its own (fused, the 50 steps would be one Job;
/// the `compare` bench measures that).
fn steps(ns: &str) -> Value {
    Value::Array((0..STEPS).map(|i| json!({"type": "apply", "isolate": true, "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}"), "namespace": ns}}})).collect())
}

/// A namespace whose ServiceAccount `flow` may create and patch ConfigMaps there.
async fn namespace_with_sa(env: &TestEnv, client: &Client, prefix: &str) -> String {
    FlowNamespace::new(prefix)
        .rules(json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]))
        .create(env, client)
        .await
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
        "build it first: cargo build -p pseudoflow-runtime --bin pseudoflow-step"
    );
    let mut opts = Options::default();
    opts.images.insert_runtime(IMAGE, step);
    let env = TestEnv::start(opts).await.unwrap();
    let client = env.client().await.unwrap();
    install_crd(&client).await;

    // PseudoFlow: the controller's client counts its requests.
    let ns = namespace_with_sa(&env, &client, "bench-pf").await;
    let requests = Arc::new(AtomicU64::new(0));
    let counter = requests.clone();
    let kc = kube::config::Kubeconfig::read_from(env.kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let counting =
        tower::util::MapRequestLayer::new(move |r: http::Request<kube::client::Body>| {
            counter.fetch_add(1, Ordering::Relaxed);
            r
        });
    let ctl_client = kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&counting)
        .build();
    let ctx = Arc::new(Context::new(
        ctl_client,
        IMAGE.into(),
        Arc::new(Metrics::default()),
    ));
    tokio::spawn(run_controller(ctx, Some(ns.clone())));
    let seen = watch_jobs(client.clone(), &ns);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = requests.load(Ordering::Relaxed);
    let t0 = Instant::now();
    apply::apply_value(&client, json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {"name": "bench", "namespace": ns}, "spec": {"serviceAccountName": "flow", "steps": steps(&ns)}}), None).await.unwrap();
    let flows: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &flow_resource());
    loop {
        let f = flows.get("bench").await.unwrap();
        if matches!(
            f.data["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        ) {
            assert_eq!(
                f.data["status"]["phase"], "Succeeded",
                "{:#}",
                f.data["status"]
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pf_total = t0.elapsed();
    let pf_requests = requests.load(Ordering::Relaxed) - before;
    let pf_gaps = gaps(&seen);

    // Baseline: a kubectl loop applying the same lowered ConfigMap+Job per step and waiting.
    let base_ns = namespace_with_sa(&env, &client, "bench-kubectl").await;
    let compiled = compile(
        &FlowId {
            name: "bench",
            namespace: Some(&base_ns),
        },
        &json!({"serviceAccountName": "flow", "steps": steps(&base_ns)}),
    )
    .unwrap();
    let flow = FlowRef {
        name: "bench".into(),
        namespace: base_ns.clone(),
        uid: String::new(),
        service_account: "flow".into(),
    };
    let base_seen = watch_jobs(client.clone(), &base_ns);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kubectl = pseudoflow_testenv::binaries::bin_dir().join("kubectl");
    let dir = tempfile_dir();
    let t1 = Instant::now();
    for node in compiled.plan.nodes().filter(|n| task_of(n).is_some()) {
        let mut lowered = emit_node(
            &compiled,
            &flow,
            &node.id,
            "none",
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
        let kc = env.kubeconfig_path();
        let ok = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(kc)
            .args(["apply", "-f"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
        let ok = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(kc)
            .args([
                "wait",
                "-n",
                &base_ns,
                "--for=condition=complete",
                "--timeout=60s",
                &format!("job/{name}"),
            ])
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }
    let base_total = t1.elapsed();
    let base_gaps = gaps(&base_seen);

    println!("orchestration of a {STEPS}-step sequential flow on testenv (2 cores), same Jobs, same cluster:");
    println!("| driver | total | gap p50 | gap p95 | API requests per step |");
    println!("|---|---|---|---|---|");
    println!(
        "| PseudoFlow controller | {:.1} s | {:.0} ms | {:.0} ms | {:.1} |",
        pf_total.as_secs_f64(),
        pct(&pf_gaps, 0.5),
        pct(&pf_gaps, 0.95),
        pf_requests as f64 / STEPS as f64
    );
    println!(
        "| kubectl apply + wait loop | {:.1} s | {:.0} ms | {:.0} ms | - |",
        base_total.as_secs_f64(),
        pct(&base_gaps, 0.5),
        pct(&base_gaps, 0.95)
    );
    println!(
        "ratio total (PseudoFlow / kubectl loop): {:.2}x; gap p50 ratio: {:.2}x",
        pf_total.as_secs_f64() / base_total.as_secs_f64(),
        pct(&pf_gaps, 0.5) / pct(&base_gaps, 0.5)
    );
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pseudoflow-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
