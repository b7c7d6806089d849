//! Pod start to step: a flow of one `apply` step (one executor Job, one pod) from its creation
//! to Succeeded, several times; on simulated nodes the executor is a host process, on real
//! nodes a container of the runtime image started by containerd and runc. What a user waits for
//! at least whenever a flow needs a Job.

use std::time::{Duration, Instant};

use kube::Client;
use pseudoflow_test_support::FlowNamespace;
use pseudoflow_testenv::{apply, TestEnv};
use serde_json::json;

use crate::common::{self, JobCounter, Row};
use crate::process;

/// `runs` one-step flows on `env`, executor pods from `image`; `title` names the row's nodes.
pub async fn run(env: &TestEnv, client: &Client, runs: usize, image: &str, title: &str) -> Row {
    let ns = FlowNamespace::new("latency")
        .rules(json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]))
        .create(env, client)
        .await;
    let ctl = process::in_process(client, image, &ns, false);
    let counter = JobCounter::start(client, &ns).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut took = Vec::new();
    // One unmeasured run first: the image's first start on a node (page cache) is not a step's.
    for r in 0..=runs {
        let name = format!("one-{r}");
        let t = Instant::now();
        apply::apply_value(client, json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"serviceAccountName": "flow", "steps": [{"type": "apply", "manifests":
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}}]}}), None)
            .await
            .unwrap();
        common::wait_succeeded(client, &ns, &name, 300).await;
        if r > 0 {
            took.push(t.elapsed());
        }
    }
    ctl.abort();
    Row {
        workload: "0. one `apply` step: pod start to step done".into(),
        driver: format!("PseudoFlow, {title}"),
        wall: common::spread(&took),
        jobs: counter.of_flows(|f| f.starts_with("one-")).to_string(),
        ratio: "-".into(),
        notes: "from creating the flow to Succeeded: the controller's Job, the pod's start, the executor's apply, its report; after one warm-up run".into(),
    }
}
