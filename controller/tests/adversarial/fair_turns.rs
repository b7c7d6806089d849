//! Attacks on the controller's shared turns (see main.rs): a tenant whose steps run in the
//! controller and wait on something that never comes (a bound object's missing Secret, plain
//! flows' `waitFor`s) must not stall another namespace's flows. One controller serves both
//! namespaces (its turns are per controller); the other namespace's one-step flow is timed idle
//! first, then under the tenant's waits, and must finish within max(2x idle, idle + 2 s); so
//! must one in the tenant's own namespace, since a parked wait holds no turn.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{run_controllers, Context};
use serde_json::{json, Value};

use crate::common::*;

fn cm_rule() -> Value {
    json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]})
}

fn secret_rule() -> Value {
    json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]})
}

/// A wait that never comes true within the test (its object is never made).
fn never(name: &str) -> Value {
    json!({"type": "waitFor", "resource": {"kind": "Secret", "name": name},
           "condition": "Exist", "timeoutSeconds": 600})
}

/// The tenant's namespace and the other one, with one controller (one set of turns) for both.
async fn two_namespaces(
    prefix: &str,
    tenant_rules: Value,
) -> (Client, String, String, tokio::task::JoinHandle<()>) {
    let (client, tenant) = prepare(&format!("{prefix}-tenant"), tenant_rules, json!([])).await;
    let (_, other) = prepare(&format!("{prefix}-other"), json!([cm_rule()]), json!([])).await;
    let ctx = Context::new(client.clone(), IMAGE.into(), Arc::new(Metrics::default()))
        .with_config(admin_config().await);
    let ctl = tokio::spawn(run_controllers(
        Arc::new(ctx),
        vec![tenant.clone(), other.clone()],
    ));
    (client, tenant, other, ctl)
}

/// How long a one-step flow with its API step in the controller takes in `ns`, from its
/// creation to Succeeded (panics past 60 s).
async fn one_step_flow(client: &Client, ns: &str, name: &str) -> Duration {
    let started = Instant::now();
    create_flow(
        client,
        ns,
        name,
        json!({"serviceAccountName": "flow", "options": {"apiSteps": "Controller"}, "steps": [
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": name}, "data": {"made": "yes"}}}]}),
    )
    .await;
    let st = wait_done(client, ns, name, 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    started.elapsed()
}

/// The other namespace's flow timed on the idle controller (after one warm-up run).
async fn idle_time(client: &Client, other: &str) -> Duration {
    one_step_flow(client, other, "warm-up").await;
    one_step_flow(client, other, "idle").await
}

/// Waits until every flow in `names` of `ns` shows its step `path` Running.
async fn all_waiting(client: &Client, ns: &str, names: &[String], path: &str) {
    for name in names {
        wait_status(client, ns, name, 120, "its wait running", |st| {
            st["steps"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|e| e["path"] == path && e["phase"] == "Running")
            })
        })
        .await;
    }
}

/// A one-step flow in `ns` (named `name`), under the tenant's waits, within max(2x idle,
/// idle + 2 s).
async fn assert_not_stalled(client: &Client, ns: &str, name: &str, idle: Duration) {
    let bound = (idle * 2).max(idle + Duration::from_secs(2));
    let loaded = one_step_flow(client, ns, name).await;
    eprintln!("{ns}/{name}: {loaded:?} under the tenant's waits (idle {idle:?})");
    assert!(
        loaded <= bound,
        "flow {ns}/{name} took {loaded:?} under the tenant's waits; idle {idle:?}, allowed \
         {bound:?}"
    );
}

/// 70 objects of a bound kind recorded in children (`record: Child`) each waiting for its
/// credentials Secret, which never comes: every object's run parks at its first `waitFor`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_objects_waiting_on_a_missing_secret_do_not_stall_another_namespace() {
    databases_waiting_on_a_missing_secret("fair-bound", "Child").await;
}

/// The same 70 objects recorded in themselves (`record: Object`, as seed 001's Database flow
/// ships): each object's run parks in a task of its own, holding no turn and no reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_objects_recorded_in_themselves_waiting_on_a_missing_secret_do_not_stall_another_namespace(
) {
    databases_waiting_on_a_missing_secret("fair-inobj", "Object").await;
}

/// 70 Databases of a flow recorded as `record` each parked on a Secret that never comes; then
/// a one-step flow in another namespace and one beside them are within their bound.
async fn databases_waiting_on_a_missing_secret(prefix: &str, record: &str) {
    let kind = TestKind::new(&format!("{prefix}.test.example.com"), "Database");
    let mut rules = kind.bound_rules().as_array().unwrap().clone();
    rules.extend([cm_rule(), secret_rule()]);
    let (client, tenant, other, ctl) = two_namespaces(prefix, Value::Array(rules)).await;
    kind.install(&client, &tenant).await;
    let idle = idle_time(&client, &other).await;
    create_flow(
        &client,
        &tenant,
        "database",
        json!({"serviceAccountName": "flow",
            "bind": {"apiVersion": format!("{prefix}.test.example.com/v1"), "kind": "Database",
                "record": record},
            "steps": [never("${object.metadata.name}-credentials"),
                {"type": "apply", "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-db\n"}]}),
    )
    .await;
    for i in 0..70 {
        apply(
            &client,
            kind.object(&tenant, &format!("db{i}"), json!({"version": "15"})),
        )
        .await;
    }
    if record == "Child" {
        // Every object has its run (a child flow) waiting, its reconciles over.
        let children = eventually_children(&client, &tenant, 70).await;
        all_waiting(&client, &tenant, &children, "spec.steps[0]").await;
    } else {
        // Every object's run is going (parked at its wait), as the flow's summary counts.
        wait_status(
            &client,
            &tenant,
            "database",
            120,
            "70 objects creating",
            |st| st["bound"]["creating"] == 70,
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_not_stalled(&client, &other, "under-load", idle).await;
    // Parked waits hold no turn at all, not even of their own namespace.
    assert_not_stalled(&client, &tenant, "beside-the-waits", idle).await;
    ctl.abort();
}

/// The child flows of the bound flow in `ns`, once there are `n`.
async fn eventually_children(client: &Client, ns: &str, n: usize) -> Vec<String> {
    let names = || async {
        flows(client, ns)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|f| f.metadata.name)
            .filter(|name| name != "database")
            .collect::<Vec<_>>()
    };
    eventually(120, &format!("{n} child flows"), || async {
        names().await.len() >= n
    })
    .await;
    names().await
}

/// 16 plain flows with their API steps in the controller, each with 4 parallel waits that
/// never come true: as many waits as the controller has turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_plain_flows_waiting_in_parallel_do_not_stall_another_namespace() {
    let rules = json!([cm_rule(), secret_rule()]);
    let (client, tenant, other, ctl) = two_namespaces("fair-plain", rules).await;
    let idle = idle_time(&client, &other).await;
    let names: Vec<String> = (0..16).map(|i| format!("waits{i}")).collect();
    for name in &names {
        let branches: Vec<Value> = (0..4)
            .map(|b| json!([never(&format!("{name}-never-{b}"))]))
            .collect();
        create_flow(
            &client,
            &tenant,
            name,
            json!({"serviceAccountName": "flow", "options": {"apiSteps": "Controller"},
                "steps": [{"type": "parallel", "waitForAll": true, "steps": branches}]}),
        )
        .await;
    }
    for b in 0..4 {
        all_waiting(
            &client,
            &tenant,
            &names,
            &format!("spec.steps[0].steps[{b}][0]"),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_not_stalled(&client, &other, "under-load", idle).await;
    // Parked waits hold no turn at all, not even of their own namespace.
    assert_not_stalled(&client, &tenant, "beside-the-waits", idle).await;
    ctl.abort();
}
