//! `${object.status}`: a bound flow's run reads its object's status as it was when the run
//! started (what earlier runs, or anyone who may write the status subresource, wrote there),
//! under both ways of recording; a status write alone — the test's, or the flow's own
//! write-back — starts no run.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pseudoflow_controller::bind::child::child_name;
use pseudoflow_controller::bind::served::mark_key;
use serde_json::{json, Value};

use crate::common::bound::*;
use crate::common::{create_flow, eventually, flows};

/// A flow recorded as `record` that writes ConfigMap `<object>-x` from the object's
/// `status.x` (`none` while it has none) and its `spec.version`.
fn status_reading_flow(record: &str) -> Value {
    json!({"serviceAccountName": "flow",
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "record": record},
        "steps": [{"type": "apply", "name": "from the status", "manifests":
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-x\ndata:\n  x: \"${(object.get('status') or {}).get('x', 'none')}\"\n  version: \"${object.spec.version}\"\n"}]})
}

/// ConfigMap `<w>-x`'s data (`Null` while it does not exist).
async fn seen(client: &Client, ns: &str, w: &str) -> Value {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&format!("{w}-x"))
        .await
        .unwrap();
    json!(cm.and_then(|c| c.data))
}

/// What names widget `w`'s last run: its child flow's run id, or (recorded in the object) its
/// served mark, which says when that run ended.
async fn last_run(client: &Client, ns: &str, w: &str) -> String {
    let child = flows(client, ns)
        .get_opt(&child_name("widgets", ns, w))
        .await;
    if let Some(c) = child.unwrap() {
        return c.data["status"]["run"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
    }
    let object = widgets(client, ns).get(w).await.unwrap();
    let a = object.metadata.annotations.unwrap_or_default();
    a.get(&mark_key(ns, "widgets")).cloned().unwrap_or_default()
}

async fn a_run_reads_the_status_its_object_had_and_a_status_write_starts_none(record: &str) {
    let prefix = format!("bind-status-{}", record.to_lowercase());
    let (client, ns) = setup(&prefix, all_verbs()).await;
    create_flow(&client, &ns, "widgets", status_reading_flow(record)).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    assert_eq!(
        seen(&client, &ns, "w").await,
        json!({"x": "none", "version": "one"})
    );
    let first = last_run(&client, &ns, "w").await;
    assert!(!first.is_empty(), "{record}");

    // Written through the status subresource, as whoever may write it: no run (the flow's own
    // write-back of its phase and conditions starts none either).
    let status = json!({"status": {"x": "from-status"}});
    widgets(&client, &ns)
        .patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(
        seen(&client, &ns, "w").await,
        json!({"x": "none", "version": "one"}),
        "{record}: a status write started a run"
    );
    assert_eq!(last_run(&client, &ns, "w").await, first, "{record}");

    // The next run (a spec change) reads it.
    create_widget(&client, &ns, "w", json!({"version": "two"})).await;
    eventually(60, "the run of version two", || async {
        seen(&client, &ns, "w").await["version"] == "two"
    })
    .await;
    assert_eq!(
        seen(&client, &ns, "w").await,
        json!({"x": "from-status", "version": "two"}),
        "{record}"
    );
    wait_widget(&client, &ns, "w", "Running").await;
    let second = last_run(&client, &ns, "w").await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        last_run(&client, &ns, "w").await,
        second,
        "{record}: its own write-back started no run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_flows_run_reads_the_status_its_object_had_and_a_status_write_starts_none() {
    a_run_reads_the_status_its_object_had_and_a_status_write_starts_none("Child").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_the_object_reads_the_status_its_object_had_and_a_status_write_starts_none() {
    a_run_reads_the_status_its_object_had_and_a_status_write_starts_none("Object").await;
}
