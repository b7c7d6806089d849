//! A rolling `loopNodes` (maxParallel 1) over the three testenv nodes stops at the first node
//! whose step fails: the flow is Failed naming that node and the step's path, the nodes before it
//! were changed, and the node after it got no Job and no file.

use kube::Client;
use serde_json::{json, Value};

use crate::common::{create_flow, env, pinned_nodes, prepare, start_node_controller, wait_done};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_loop_nodes_stops_at_the_failing_node_and_names_it() {
    let env = env();
    // The flow's identity may list nodes (what loopNodes needs), nothing more.
    let node_reader =
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]);
    let (client, ns) = prepare("rolling", json!([]), node_reader).await;
    let ctl = start_node_controller(&client, &ns).await;
    // Nodes are visited sorted by name: cp-0, worker-0, worker-1; the second one fails.
    let file = format!("etc/pseudoflow-test/{ns}.conf");
    create_rolling_flow(&client, &ns, &file).await;
    let status = wait_done(&client, &ns, "rolling", 180).await;

    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(status["reason"], "StepFailed", "{status:#}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("spec.steps[0].steps[1]") && message.contains("worker-0"),
        "the message names the failed step's path and the node: {message}"
    );
    let failed: Vec<&Value> = status["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["phase"] == "Failed")
        .collect();
    assert!(
        failed
            .iter()
            .any(|s| s["path"] == "spec.steps[0].steps[1]" && s["type"] == "script"),
        "the script step is listed as Failed: {failed:#?}"
    );

    let pinned = pinned_nodes(&client, &ns).await;
    let mut sorted = pinned.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["cp-0", "worker-0"],
        "one Job per node (configFile and script fused), on the first two nodes only: {pinned:?}"
    );
    let content = |node: &str| std::fs::read_to_string(env.node_root(node).join(&file)).ok();
    assert_eq!(content("cp-0").as_deref(), Some("rolled on cp-0\n"));
    assert_eq!(
        content("worker-0").as_deref(),
        Some("rolled on worker-0\n"),
        "the failing node's first step ran before its script failed"
    );
    assert_eq!(
        content("worker-1"),
        None,
        "the rollout stopped before worker-1"
    );
    ctl.abort();
}

async fn create_rolling_flow(client: &Client, ns: &str, file: &str) {
    create_flow(
        client,
        ns,
        "rolling",
        json!({
            "serviceAccountName": "flow",
            "steps": [{"type": "loopNodes", "selector": "", "maxParallel": 1, "steps": [
                {"type": "configFile", "path": format!("/{file}"), "content": "rolled on ${node}\n"},
                {"type": "script", "code": "test \"${node}\" != worker-0"}
            ]}]
        }),
    )
    .await;
}
