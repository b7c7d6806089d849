//! Node maintenance on the testenv nodes: `drain` evicts through the Eviction API and a
//! PodDisruptionBudget stops it (the failure names the budget); `uncordon` lifts only this
//! flow's cordons; loopNodes' `drain:` cordons before a node's steps and uncordons after; a
//! failed `gate:` stops the rollout naming node and condition; a flow identity without
//! `pods/eviction` fails Forbidden and leaves no cordon of its own.
//!
//! These tests cordon the shared cluster's nodes, so they hold [`LOCK`] and put every node
//! back (schedulable, no cordon mark) before and after.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use pseudoflow_crd::steps::cordon::CORDONED_BY_ANNOTATION;
use serde_json::{json, Value};

use pseudoflow_test_support as common;

use common::{create_flow, eventually, prepare, start_controller, wait_done};

/// One test at a time touches the nodes.
static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The label on every workload pod and budget these tests make, so leftovers of a failed test
/// (a budget blocking every later drain) are removed before the next one.
const WORKLOAD_LABEL: &str = "e2e-node-maintenance";

/// Every node schedulable again, without a cordon mark; this file's workloads and budgets gone.
async fn reset_nodes(client: &Client) {
    let selector = ListParams::default().labels(WORKLOAD_LABEL);
    let pdbs: Api<PodDisruptionBudget> = Api::all(client.clone());
    for b in pdbs.list(&selector).await.unwrap().items {
        let ns = b.metadata.namespace.unwrap();
        let _ = Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns)
            .delete(&b.metadata.name.unwrap(), &DeleteParams::default())
            .await;
    }
    let pods: Api<Pod> = Api::all(client.clone());
    for p in pods.list(&selector).await.unwrap().items {
        let ns = p.metadata.namespace.unwrap();
        let _ = Api::<Pod>::namespaced(client.clone(), &ns)
            .delete(
                &p.metadata.name.unwrap(),
                &DeleteParams::default().grace_period(0),
            )
            .await;
    }
    eventually(60, "this file's workload pods are gone", || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move { pods.list(&selector).await.unwrap().items.is_empty() }
    })
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    for n in ["cp-0", "worker-0", "worker-1"] {
        let patch = json!({"metadata": {"annotations": {CORDONED_BY_ANNOTATION: null,
            "ops.example.com/cordoned-run": null}}, "spec": {"unschedulable": null}});
        nodes
            .patch(n, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
}

/// Cordons `name` as an operator does with `kubectl cordon`: unschedulable, without the mark a
/// flow's cordon carries.
async fn cordon_by_hand(client: &Client, name: &str) {
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
}

async fn node(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone()).get(name).await.unwrap()
}

fn cordoned(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

fn mark(n: &Node) -> Option<String> {
    n.metadata
        .annotations
        .as_ref()?
        .get(CORDONED_BY_ANNOTATION)
        .cloned()
}

/// What a flow identity needs for drain/uncordon (docs/security.md), eviction included or not.
fn maintainer_rules(evict: bool) -> Value {
    let mut rules = vec![
        json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}),
        json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}),
    ];
    if evict {
        rules.push(json!({"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}));
    }
    Value::Array(rules)
}

/// A pod bound to `node` whose image the testenv kubelet reports Running and Ready at once.
async fn workload(client: &Client, ns: &str, name: &str, node: &str, mut labels: Value) -> Pod {
    labels[WORKLOAD_LABEL] = json!("yes");
    let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "example/app:1"}]}}))
    .unwrap();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &pod).await.unwrap();
    let name = name.to_string();
    eventually(30, "the workload pod runs", || {
        let (api, name) = (api.clone(), name.clone());
        async move {
            let p = api.get(&name).await.unwrap();
            p.status.and_then(|s| s.phase).as_deref() == Some("Running")
        }
    })
    .await;
    api.get(&name).await.unwrap()
}

async fn pod_exists(client: &Client, ns: &str, name: &str) -> bool {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
}

fn message(status: &Value) -> String {
    status["message"].as_str().unwrap_or_default().to_string()
}

/// The message of the `status.steps` entries at `path`, joined.
fn step_messages(status: &Value, path: &str) -> String {
    status["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["path"] == path)
        .map(|s| s["message"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_evicts_the_nodes_pods_and_keeps_skipped_ones() {
    let _lock = LOCK.lock().await;
    let (client, ns) = prepare("drain", json!([]), maintainer_rules(true)).await;
    reset_nodes(&client).await;
    let _ctl = start_controller(&client, &ns);
    workload(&client, &ns, "web", "worker-0", json!({"app": "web"})).await;
    workload(&client, &ns, "agent", "worker-0", json!({"app": "agent"})).await;
    let other = workload(&client, &ns, "elsewhere", "worker-1", json!({"app": "web"})).await;
    create_flow(&client, &ns, "drain", json!({"serviceAccountName": "flow", "steps": [
        {"type": "drain", "node": "worker-0", "skipSelector": "app=agent", "gracePeriodSeconds": 5},
        {"type": "waitFor", "resource": {"kind": "Node", "name": "worker-0"}, "condition": "Custom",
            "jsonPath": ".spec.unschedulable", "op": "equals", "value": "true", "timeoutSeconds": 10},
        {"type": "uncordon", "node": "worker-0"}
    ]}))
    .await;
    let status = wait_done(&client, &ns, "drain", 120).await;

    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert!(
        !pod_exists(&client, &ns, "web").await,
        "the pod on the drained node was evicted"
    );
    assert!(
        pod_exists(&client, &ns, "agent").await,
        "skipSelector kept its pod"
    );
    let still = Api::<Pod>::namespaced(client.clone(), &ns)
        .get("elsewhere")
        .await
        .unwrap();
    assert_eq!(
        still.metadata.uid, other.metadata.uid,
        "a pod on another node is untouched"
    );
    let drained = step_messages(&status, "spec.steps[0]");
    assert!(
        drained.contains("cordoned") && drained.contains(&format!("{ns}/web")),
        "{drained}"
    );
    reset_nodes(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disruption_budget_blocks_drain_until_its_timeout_and_is_named() {
    let _lock = LOCK.lock().await;
    let (client, ns) = prepare("pdb", json!([]), maintainer_rules(true)).await;
    reset_nodes(&client).await;
    let _ctl = start_controller(&client, &ns);
    workload(
        &client,
        &ns,
        "guarded",
        "worker-0",
        json!({"app": "guarded"}),
    )
    .await;
    common::apply(
        &client,
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-one", "namespace": ns, "labels": {WORKLOAD_LABEL: "yes"}},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}),
    )
    .await;
    // The disruption controller has counted the pod: the budget allows no disruption.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    eventually(30, "the budget is observed", || {
        let pdbs = pdbs.clone();
        async move {
            let b = pdbs.get("keep-one").await.unwrap();
            b.status
                .is_some_and(|s| s.current_healthy == 1 && s.disruptions_allowed == 0)
        }
    })
    .await;
    create_flow(
        &client,
        &ns,
        "blocked",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "drain", "node": "worker-0", "timeoutSeconds": 20}
        ]}),
    )
    .await;
    let started = std::time::Instant::now();
    let status = wait_done(&client, &ns, "blocked", 120).await;
    let after = node(&client, "worker-0").await;

    assert_eq!(status["phase"], "Failed", "{status:#}");
    let msg = message(&status);
    assert!(
        msg.contains("PodDisruptionBudget keep-one") && msg.contains(&format!("{ns}/guarded")),
        "the failure names the budget and the pod: {msg}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(15),
        "the drain kept retrying until near its 20 s timeout ({:?})",
        started.elapsed()
    );
    assert!(pod_exists(&client, &ns, "guarded").await, "the pod stays");
    assert!(
        !cordoned(&after) && mark(&after).is_none(),
        "the failed drain lifted the cordon it made: {:?}",
        after.spec
    );
    reset_nodes(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncordon_leaves_a_node_someone_else_cordoned() {
    let _lock = LOCK.lock().await;
    let (client, ns) = prepare("own", json!([]), maintainer_rules(true)).await;
    reset_nodes(&client).await;
    // An operator cordoned worker-1 by hand (kubectl cordon: no mark).
    cordon_by_hand(&client, "worker-1").await;
    let _ctl = start_controller(&client, &ns);
    create_flow(
        &client,
        &ns,
        "own",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "loopNodes", "selector": "!node-role.kubernetes.io/control-plane",
                "drain": {"timeoutSeconds": 60},
                "steps": [{"type": "log", "message": "maintaining ${node}"}]}
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "own", 120).await;
    let (w0, w1) = (
        node(&client, "worker-0").await,
        node(&client, "worker-1").await,
    );

    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert!(
        !cordoned(&w0) && mark(&w0).is_none(),
        "worker-0, cordoned by the flow, is open again: {:?}",
        w0.spec
    );
    assert!(
        cordoned(&w1),
        "worker-1, cordoned by someone else, stays cordoned"
    );
    assert_eq!(mark(&w1), None, "and the flow did not claim it");
    reset_nodes(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_nodes_drain_cordons_before_the_steps_and_uncordons_after() {
    let _lock = LOCK.lock().await;
    let (client, ns) = prepare("order", json!([]), maintainer_rules(true)).await;
    reset_nodes(&client).await;
    let _ctl = start_controller(&client, &ns);
    workload(&client, &ns, "w1-app", "worker-1", json!({"app": "x"})).await;
    let node_is = |op: &str| {
        json!({"resource": {"kind": "Node", "name": "${node}"}, "condition": "Custom",
            "jsonPath": ".spec.unschedulable", "op": op, "value": "true"})
    };
    let mut body = node_is("equals");
    body["type"] = json!("waitFor");
    body["timeoutSeconds"] = json!(10);
    create_flow(&client, &ns, "order", json!({"serviceAccountName": "flow", "steps": [
        {"type": "loopNodes", "selector": "!node-role.kubernetes.io/control-plane", "maxParallel": 1,
            "drain": {"gracePeriodSeconds": 1},
            "steps": [body],
            // After the node's steps: the node is open again.
            "gate": {"conditions": [node_is("notEquals")], "timeoutSeconds": 10}}
    ]}))
    .await;
    let status = wait_done(&client, &ns, "order", 180).await;
    let nodes = [
        node(&client, "worker-0").await,
        node(&client, "worker-1").await,
    ];

    assert_eq!(
        status["phase"], "Succeeded",
        "each node was cordoned while its steps ran and open at its gate: {status:#}"
    );
    for n in &nodes {
        assert!(!cordoned(n) && mark(n).is_none(), "{:?}", n.metadata.name);
    }
    assert!(
        !pod_exists(&client, &ns, "w1-app").await,
        "worker-1's pod was evicted"
    );
    reset_nodes(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_gate_stops_the_rollout_naming_the_node_and_the_condition() {
    let _lock = LOCK.lock().await;
    let rules = json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]},
    ]);
    let node_reader =
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]);
    let (client, ns) = prepare("gate", rules, node_reader).await;
    let _ctl = start_controller(&client, &ns);
    create_flow(&client, &ns, "gated", json!({"serviceAccountName": "flow", "steps": [
        {"type": "loopNodes", "selector": "!node-role.kubernetes.io/control-plane", "maxParallel": 1,
            "steps": [{"type": "apply", "manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "touched-${node}"}}]}],
            "gate": {"timeoutSeconds": 5, "conditions": [
                {"resource": {"kind": "Node", "name": "${node}"}, "condition": "Ready"},
                {"resource": {"kind": "ConfigMap", "name": "healthy-${node}"}, "condition": "Exist"}
            ]}}
    ]}))
    .await;
    let status = wait_done(&client, &ns, "gated", 120).await;

    assert_eq!(status["phase"], "Failed", "{status:#}");
    let msg = message(&status);
    assert!(
        msg.contains("worker-0")
            && msg.contains("spec.steps[0].gate.conditions[1]")
            && msg.contains("healthy-worker-0"),
        "the failure names the node and the condition: {msg}"
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(cms.get_opt("touched-worker-0").await.unwrap().is_some());
    assert!(
        cms.get_opt("touched-worker-1").await.unwrap().is_none(),
        "the rollout stopped before worker-1"
    );
    reset_nodes(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_eviction_rights_drain_fails_forbidden_and_leaves_no_cordon_of_its_own() {
    let _lock = LOCK.lock().await;
    let (client, ns) = prepare("noevict", json!([]), maintainer_rules(false)).await;
    reset_nodes(&client).await;
    let _ctl = start_controller(&client, &ns);
    workload(&client, &ns, "victim", "worker-0", json!({"app": "victim"})).await;
    create_flow(
        &client,
        &ns,
        "sneaky",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "drain", "node": "worker-0", "timeoutSeconds": 60}
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "sneaky", 120).await;
    let after = node(&client, "worker-0").await;

    assert_eq!(status["phase"], "Failed", "{status:#}");
    let msg = message(&status);
    assert!(
        msg.contains("forbidden")
            && msg.contains("pods/eviction")
            && msg.contains(&format!("{ns}/flow")),
        "the failure names the missing right and the identity: {msg}"
    );
    assert!(
        pod_exists(&client, &ns, "victim").await,
        "nothing was evicted"
    );
    assert!(
        !cordoned(&after) && mark(&after).is_none(),
        "no cordon of the flow's is left: {:?} {:?}",
        after.spec,
        after.metadata.annotations
    );
    reset_nodes(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_marks_only_a_cordon_it_made() {
    let _lock = LOCK.lock().await;
    let (client, ns) = prepare("mark", json!([]), maintainer_rules(false)).await;
    reset_nodes(&client).await;
    cordon_by_hand(&client, "worker-0").await;
    let _ctl = start_controller(&client, &ns);
    create_flow(
        &client,
        &ns,
        "mark",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "cordon", "node": "worker-0", "isolate": true},
            {"type": "uncordon", "node": "worker-0", "isolate": true},
            {"type": "cordon", "node": "worker-1", "isolate": true}
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "mark", 120).await;
    let (w0, w1) = (
        node(&client, "worker-0").await,
        node(&client, "worker-1").await,
    );

    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert!(
        cordoned(&w0) && mark(&w0).is_none(),
        "a hand-made cordon is neither claimed nor lifted"
    );
    let said = step_messages(&status, "spec.steps[1]");
    assert!(said.contains("stays cordoned"), "{said}");
    assert!(cordoned(&w1));
    assert_eq!(
        mark(&w1).as_deref(),
        Some(format!("{ns}/mark").as_str()),
        "a cordon the flow made carries its mark"
    );
    reset_nodes(&client).await;
}
