//! Benchmark 5: one flow bound to a kind (`spec.bind`) serving many objects of it created at
//! once, as a hand-written operator would: each object gets its own run (one `apply` of a
//! ConfigMap named after it) and its status written back. Wall time: from the first create
//! until every object's `Ready` condition is True. The controller runs as its own process, so
//! its peak RSS is its own. `PSEUDOFLOW_BENCH_BOUND_OBJECTS` (default 1,000) sets the count.
//! Then every object is re-run `PSEUDOFLOW_BENCH_BOUND_RERUNS` (3) times and the objects left
//! are counted (5b, `rerun.rs`). `PSEUDOFLOW_BENCH_BOUND_API_STEPS=Job` runs the objects' steps in
//! executor Jobs instead of the controller (so that each run leaves Jobs, pods and Secrets).

use std::path::Path;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;
use pseudoflow_controller::flow::flow_resource;
use pseudoflow_test_support::{FlowNamespace, TestKind};
use pseudoflow_testenv::{apply, TestEnv};
use serde_json::{json, Value};

use crate::common::{self, JobCounter, Row};
use crate::process::ControllerProcess;

/// The kind's group, shared with the kopf section (`kopf.rs`), which serves the same kind.
pub const GROUP: &str = "bench.example.com";

/// The operator: a ConfigMap per Gadget, holding its size; phase and conditions written back
/// (also the flow the kopf section compares with bench/kopf/operator.py). `bind.record` unset,
/// as a new user writes it: recorded in the Gadgets (`Object`) since the default changed
/// (issue #41); figures measured before 2026-12-07 are of a child flow per Gadget.
pub fn bound_flow(ns: &str) -> Value {
    json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "metadata": {"name": "gadget", "namespace": ns},
        "spec": {"serviceAccountName": "flow",
            "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Gadget"},
            "steps": [{"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "${object.metadata.name}-config", "namespace": ns},
                "data": {"size": "${object.spec.size}"}}}]}})
}

/// Whether the object's Ready condition is True.
pub fn ready(o: &DynamicObject) -> bool {
    o.data["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

pub async fn run(
    env: &TestEnv,
    client: &Client,
    dir: &Path,
    objects: usize,
    timeout: Duration,
) -> Vec<Row> {
    let gadgets = TestKind::new(GROUP, "Gadget");
    let mut rules = gadgets.bound_rules();
    rules.as_array_mut().unwrap().push(
        json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}),
    );
    let ns = FlowNamespace::new("bound")
        .rules(rules)
        .create(env, client)
        .await;
    let api = gadgets.install(client, &ns).await;
    let mut controller = ControllerProcess::spawn(env, dir, &ns, "bound-controller.log");
    let counter = JobCounter::start(client, &ns).await;
    let mut flow = bound_flow(&ns);
    // Where the objects' `apply` runs (`spec.options.apiSteps`): default Auto, the controller.
    if let Ok(api_steps) = std::env::var("PSEUDOFLOW_BENCH_BOUND_API_STEPS") {
        flow["spec"]["options"] = json!({"apiSteps": api_steps});
    }
    apply::apply_value(client, flow, None).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_kib = controller.peak_kib();

    let t = Instant::now();
    let created = common::apply_all(
        client,
        (0..objects)
            .map(|i| gadgets.object(&ns, &format!("g{i}"), json!({"size": format!("{i}Gi")}))),
    )
    .await;
    println!(
        "bound: {objects} objects created in {:.1} s",
        created.as_secs_f64()
    );
    let (ready_count, failed) = controller
        .await_all("bound", objects, (t, timeout), &counter, || async {
            let list = api.list(&ListParams::default()).await.unwrap().items;
            let failed = |o: &&DynamicObject| o.data["status"]["phase"] == "Failed";
            (
                list.iter().filter(|o| ready(o)).count(),
                list.iter().filter(failed).count(),
            )
        })
        .await;
    let took = t.elapsed();
    // How far the bound flow's summary (`status.bound`) is behind its objects: from the moment
    // every object was seen Ready until the summary counts them all served (issue #41 asks
    // for at most 5 s at 10,000 objects).
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &flow_resource());
    let lag = if ready_count == objects {
        summary_lag(&flows, objects, Duration::from_secs(120)).await
    } else {
        None
    };
    let peak = controller.peak_kib();
    // Section 5's own Jobs, before 5b's re-runs make more.
    let jobs = counter.of_flows(|f| f.starts_with("gadget-")).to_string();
    // 5b: every object re-run, then what is left counted (bounded history).
    let reruns = common::env_usize("PSEUDOFLOW_BENCH_BOUND_RERUNS", 3);
    let history = if ready_count == objects && failed == 0 && reruns > 0 {
        Some(crate::rerun::run(client, &ns, objects, reruns, timeout).await)
    } else {
        None
    };
    controller.kill().await;
    let bound = flows.get("gadget").await.unwrap().data["status"].clone();
    assert_eq!(failed, 0, "{failed} of {objects} objects Failed: {bound:#}");
    // Every object's own work was done: its ConfigMap, with its size.
    let configs: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    let made = configs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with("-config"))
        })
        .count();
    let summary = bound["message"].clone();
    let done = ready_count == objects;
    let wall = if done {
        common::secs(took)
    } else {
        format!(
            "not done: {ready_count}/{objects} Ready after {}",
            common::secs(took)
        )
    };
    let mut rows = vec![Row {
        workload: format!("5. {objects} objects of a kind created at once, one flow bound to it"),
        driver: "PseudoFlow (release `pseudoflow-controller` process)".into(),
        wall,
        jobs,
        ratio: "-".into(),
        notes: format!(
            "until every object's Ready condition is True; controller peak RSS (VmHWM) {:.1} MiB ({:.1} MiB idle); all created in {}; {made} ConfigMaps made; the flow's summary counted them all {} later; bound flow says {summary}",
            peak as f64 / 1024.0,
            idle_kib as f64 / 1024.0,
            common::secs(created),
            lag.map_or_else(|| "not (within 120 s)".to_string(), common::secs),
        ),
    }];
    rows.extend(history);
    rows
}

/// How long after now the flow's `status.bound` counts all `objects` served (`running`), polled
/// every 100 ms; None if not within `timeout`.
async fn summary_lag(
    flows: &Api<DynamicObject>,
    objects: usize,
    timeout: Duration,
) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < timeout {
        let flow = flows.get("gadget").await.unwrap();
        let running = flow.data["status"]["bound"]["running"]
            .as_u64()
            .unwrap_or(0);
        if usize::try_from(running).unwrap_or(0) >= objects {
            return Some(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}
