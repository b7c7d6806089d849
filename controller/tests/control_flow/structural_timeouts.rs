//! `timeoutSeconds` on a structural step (loop, loopNodes, parallel, retry, includeFlow) bounds
//! its whole body (seed §5 "timeouts per step"): once it passes, what runs inside is
//! stopped — its Job deleted — and the step fails saying so; `continueOnError` goes on after it.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{create_flow, job_node, jobs, setup, wait_done};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_past_its_timeout_stops_the_running_job_and_fails_and_the_flow_goes_on() {
    let (client, ns, ctl) = setup(
        "bodytimeout",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]),
        json!([]),
    )
    .await;
    let began = Instant::now();
    create_flow(
        &client,
        &ns,
        "slow",
        json!({
            "serviceAccountName": "flow",
            "steps": [
                {"type": "loop", "forEach": ["a", "b", "c"], "timeoutSeconds": 5,
                 "continueOnError": true,
                 "steps": [{"type": "exec", "cmd": "sleep 60", "timeoutSeconds": 120}]},
                {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "after"}, "data": {"ran": "yes"}}}
            ]
        }),
    )
    .await;
    let status = wait_done(&client, &ns, "slow", 60).await;
    let took = began.elapsed();
    assert_eq!(status["phase"], "Succeeded", "continueOnError: {status:#}");
    assert!(
        took < Duration::from_secs(40),
        "ended by the loop's 5 s, not the exec's 60 s: {took:?}"
    );
    let steps = status["steps"].as_array().unwrap();
    let the_loop = steps.iter().find(|s| s["path"] == "spec.steps[0]").unwrap();
    assert_eq!(the_loop["phase"], "Failed", "{the_loop:#}");
    assert_eq!(
        the_loop["message"], "timed out after 5s (its timeoutSeconds)",
        "{the_loop:#}"
    );
    let item = steps
        .iter()
        .find(|s| s["path"] == "spec.steps[0].steps[0]")
        .unwrap();
    assert_eq!(
        item["instances"]["succeeded"].as_u64().unwrap_or(0),
        0,
        "no item finished: {item:#} (loop: {the_loop:#})"
    );
    // The first item's Job was deleted; the later items never got one.
    let body_jobs: Vec<_> = jobs(&client, &ns)
        .await
        .into_iter()
        .filter(|j| job_node(j) == "s0-s0")
        .collect();
    assert!(
        body_jobs
            .iter()
            .all(|j| j.metadata.deletion_timestamp.is_some()),
        "the running item's Job is stopped: {:?}",
        body_jobs
            .iter()
            .map(|j| &j.metadata.name)
            .collect::<Vec<_>>()
    );
    let after = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
        .get_opt("after")
        .await
        .unwrap();
    assert!(after.is_some(), "the step after the loop ran");
    ctl.abort();
}
