//! Benchmark 4: many flows of 5 `apply` steps created at once, run by the controller as a
//! separate process (the release `pseudoflow-controller` binary, as deployed) so that its peak
//! RSS (`VmHWM` in /proc/<pid>/status) is its own. Wall time: from the first create to every flow
//! Succeeded. `PSEUDOFLOW_BENCH_SCALE_FLOWS` (default 1,000) sets the count. Run once per design
//! of where API steps run (`spec.options.apiSteps`): `Job` (each flow's steps fused into one
//! executor Job) and `Controller` (the controller runs them as the flow's ServiceAccount).

use std::path::Path;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;
use pseudoflow_controller::flow::flow_resource;
use pseudoflow_test_support::FlowNamespace;
use pseudoflow_testenv::TestEnv;
use serde_json::{json, Value};

use crate::common::{self, JobCounter, Row};
use crate::process::ControllerProcess;

const STEPS: usize = 5;

fn spec(ns: &str, flow: usize, api_steps: &str) -> Value {
    let steps: Vec<Value> = (0..STEPS)
        .map(|k| json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("scale-{flow}-{k}"), "namespace": ns}, "data": {"k": k.to_string()}}}))
        .collect();
    json!({"serviceAccountName": "flow", "options": {"apiSteps": api_steps}, "steps": steps})
}

pub async fn run(
    env: &TestEnv,
    client: &Client,
    dir: &Path,
    flows: usize,
    timeout: Duration,
    api_steps: &str,
) -> Vec<Row> {
    let ns = FlowNamespace::new(&format!("scale-{}", api_steps.to_lowercase()))
        .rules(json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]))
        .create(env, client)
        .await;
    let mut controller = ControllerProcess::spawn(env, dir, &ns, "scale-controller.log");
    let counter = JobCounter::start(client, &ns).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_kib = controller.peak_kib();

    let t = Instant::now();
    let created = common::apply_all(
        client,
        (0..flows).map(|i| {
            json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": format!("scale-{i}"), "namespace": ns}, "spec": spec(&ns, i, api_steps)})
        }),
    )
    .await;
    println!(
        "scale: {flows} flows created in {:.1} s",
        created.as_secs_f64()
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &flow_resource());
    let phase_count = |list: &[DynamicObject], phase: &str| {
        let of = |f: &&DynamicObject| f.data["status"]["phase"] == phase;
        list.iter().filter(of).count()
    };
    let (succeeded, failed) = controller
        .await_all("scale", flows, (t, timeout), &counter, || async {
            let list = api.list(&ListParams::default()).await.unwrap().items;
            (
                phase_count(&list, "Succeeded"),
                phase_count(&list, "Failed"),
            )
        })
        .await;
    let took = t.elapsed();
    let peak = controller.peak_kib();
    controller.kill().await;
    assert_eq!(failed, 0, "{failed} of {flows} flows Failed");
    let done = succeeded == flows;
    let wall = if done {
        common::secs(took)
    } else {
        format!(
            "not done: {succeeded}/{flows} Succeeded after {}",
            common::secs(took)
        )
    };
    vec![Row {
        workload: format!("4. {flows} flows of {STEPS} `apply` steps created at once"),
        driver: format!("PseudoFlow, `apiSteps: {api_steps}` (release `pseudoflow-controller` process)"),
        wall,
        jobs: counter.of_flows(|f| f.starts_with("scale-")).to_string(),
        ratio: "-".into(),
        notes: format!(
            "{:.1} flows/s; controller peak RSS (VmHWM) {:.1} MiB ({:.1} MiB idle); all created in {}; until all Succeeded",
            flows as f64 / took.as_secs_f64(),
            peak as f64 / 1024.0,
            idle_kib as f64 / 1024.0,
            common::secs(created)
        ),
    }]
}
