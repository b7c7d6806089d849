//! The seed's §10 flow (examples/labels-from-exec.yaml, steps as written) end to end, and its
//! re-run once every node has the label: kubectl then prints nothing, `''.split(' ')` is `[]`,
//! and the re-run succeeds changing nothing (seed §5, §13.3). No other test of its binary labels
//! a node `zone`.

use std::collections::BTreeMap;
use std::path::Path;

use kube::Client;
use serde_json::{json, Value};

use crate::common::{create_flow, flow_events, request_run, setup, step, wait_done, wait_status};

/// Reading nodes (kubectl in the step pod) and labelling them (setLabel).
fn node_rules() -> Value {
    json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}])
}

/// Every node's `zone` label and what a write outside the status subresource would change: its
/// labels, annotations, spec and the non-status managedFields entries. Not the resourceVersion:
/// the testenv kubelet's status heartbeat bumps it every 10 s, as a real kubelet's does.
async fn nodes(client: &Client) -> BTreeMap<String, (Option<String>, String)> {
    crate::common::all_nodes(client)
        .await
        .into_iter()
        .map(|n| {
            let zone = n
                .metadata
                .labels
                .clone()
                .unwrap_or_default()
                .get("zone")
                .cloned();
            let writes: Vec<_> = n
                .metadata
                .managed_fields
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|m| m.subresource.as_deref() != Some("status"))
                .collect();
            let fingerprint = serde_json::to_string(&json!({
                "labels": n.metadata.labels,
                "annotations": n.metadata.annotations,
                "spec": n.spec,
                "writes": writes,
            }))
            .unwrap();
            (n.metadata.name.unwrap(), (zone, fingerprint))
        })
        .collect()
}

/// The example's spec, with this test's ServiceAccount.
fn example_spec() -> Value {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(repo.join("examples/labels-from-exec.yaml")).unwrap();
    let flow: Value = serde_yaml::from_str(&text).unwrap();
    let mut spec = flow["spec"].clone();
    spec["serviceAccountName"] = json!("flow");
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_labels_from_exec_flow_reruns_without_change_once_every_node_is_labelled() {
    let (client, ns, ctl) = setup("labelexec", json!([]), node_rules()).await;
    let before = nodes(&client).await;
    assert!(before.len() >= 2, "{before:?}");
    assert!(
        before.values().all(|(zone, _)| zone.is_none()),
        "{before:?}"
    );

    create_flow(&client, &ns, "labels-from-exec", example_spec()).await;
    let st = wait_done(&client, &ns, "labels-from-exec", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let labelled = nodes(&client).await;
    for (name, (zone, _)) in &labelled {
        assert_eq!(zone.as_deref(), Some("auto"), "node {name}");
    }

    // The re-run: kubectl prints nothing, the loop has no items, nothing is touched.
    request_run(&client, &ns, "labels-from-exec", "again").await;
    let st = wait_status(&client, &ns, "labels-from-exec", 120, "the re-run", |st| {
        st["run"]["trigger"] == "again"
            && matches!(st["phase"].as_str(), Some("Succeeded" | "Failed"))
    })
    .await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let looped = step(&st, "spec.steps[1]");
    assert_eq!(looped["message"], "0 items", "{st:#}");
    assert_eq!(looped["changed"], json!(false), "{st:#}");
    assert!(
        st["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["path"] != "spec.steps[1].steps[0]"),
        "no setLabel ran: {st:#}"
    );
    assert_eq!(
        nodes(&client).await,
        labelled,
        "no node was written outside its status"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_is_told_by_the_step_path_not_the_internal_node_id() {
    let (client, ns, ctl) = setup("runfailed", json!([]), node_rules()).await;
    create_flow(
        &client,
        &ns,
        "fails",
        json!({
            "serviceAccountName": "flow",
            "steps": [
                {"type": "log", "message": "first"},
                {"type": "loop", "forEach": ["no-such-node"], "steps": [
                    {"type": "setLabel", "target": {"kind": "Node", "name": "${item}"}, "labels": {"zone": "x"}}
                ]}
            ]
        }),
    )
    .await;
    let st = wait_done(&client, &ns, "fails", 120).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    let events = flow_events(&client, &ns, "fails").await;
    let note = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("RunFailed"))
        .and_then(|e| e.message.clone())
        .unwrap_or_else(|| panic!("a RunFailed Event: {events:#?}"));
    assert!(
        note.starts_with("spec.steps[1].steps[0] [0]: "),
        "leads with the step path: {note}"
    );
    assert!(note.contains("not found"), "{note}");
    assert_eq!(
        st["message"].as_str(),
        Some(note.as_str()),
        "as status says it"
    );
    ctl.abort();
}
