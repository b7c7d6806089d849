//! API steps the controller runs itself, as the flow's ServiceAccount, instead of executor Jobs
//! (`spec.options.apiSteps`, and by default in flows bound to a kind; docs/decisions.md
//! #api-steps-in-the-controller), on testenv: no Job and no pod exists for them; the flow's
//! ServiceAccount's rights apply, never the controller's (here an admin); per-step status,
//! Events, timeouts and `continueOnError` behave as in Jobs; a step waiting when its controller
//! stops is run again by the next one, and a run aborted by Replace stops it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::{
    apply, create_flow, flow_events, jobs, setup, start_controller, step, wait_done, wait_status,
    TestKind,
};

fn cm_rule() -> Value {
    json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]})
}

fn cm(name: &str) -> Value {
    json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"made": "yes"}}})
}

async fn config_map(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

async fn notes(client: &Client, ns: &str, flow: &str) -> Vec<String> {
    flow_events(client, ns, flow)
        .await
        .into_iter()
        .filter_map(|e| e.message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_flow_serves_an_object_without_a_job_or_a_pod() {
    let kind = TestKind::new("inctl.test.example.com", "Gadget");
    let mut rules = kind.bound_rules().as_array().unwrap().clone();
    rules.push(cm_rule());
    let (client, ns, _ctl) = setup("inctl-bound", Value::Array(rules), json!([])).await;
    let gadgets = kind.install(&client, &ns).await;
    create_flow(
        &client,
        &ns,
        "gadgets",
        json!({"serviceAccountName": "flow",
            "bind": {"apiVersion": "inctl.test.example.com/v1", "kind": "Gadget", "record": "Child"},
            "steps": [{"type": "apply", "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-size\ndata:\n  size: \"${object.spec.size}\"\n"}]}),
    )
    .await;
    apply(&client, kind.object(&ns, "g1", json!({"size": "3Gi"}))).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while gadgets.get("g1").await.unwrap().data["status"]["phase"] != "Running" {
        if std::time::Instant::now() > deadline {
            let flows = crate::common::flows(&client, &ns)
                .list(&Default::default())
                .await
                .unwrap();
            let states: Vec<_> = flows
                .items
                .iter()
                .map(|f| (f.metadata.name.clone(), f.data["status"].clone()))
                .collect();
            panic!(
                "gadget g1 not Running in 60 s: {:#?}; flows {states:#?}",
                gadgets.get("g1").await.unwrap().data
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let made = config_map(&client, &ns, "g1-size")
        .await
        .expect("its ConfigMap");
    assert_eq!(made.data.unwrap()["size"], "3Gi");
    assert!(
        jobs(&client, &ns).await.is_empty(),
        "the object's run made no Job"
    );
    let child = crate::common::flows(&client, &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|f| f.metadata.name.as_deref() != Some("gadgets"))
        .expect("the object's flow");
    let child = child.metadata.name.unwrap();
    let said = notes(&client, &ns, &child).await;
    assert!(
        said.iter()
            .any(|n| n.contains("started (in the controller, as ServiceAccount flow)")),
        "{said:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_runs_with_the_service_accounts_rights_never_the_controllers() {
    // The controller here is the cluster's admin; the flow's ServiceAccount may touch
    // ConfigMaps only.
    let (client, ns, _ctl) = setup("inctl-rights", json!([cm_rule()]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "rights",
        json!({"serviceAccountName": "flow", "options": {"apiSteps": "Controller"}, "steps": [
            cm("allowed"),
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "not-allowed"}, "stringData": {"k": "v"}}},
        ]}),
    )
    .await;
    let st = wait_done(&client, &ns, "rights", 60).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    let denied = step(&st, "spec.steps[1]");
    assert_eq!(denied["phase"], "Failed", "{st:#}");
    let msg = denied["message"].as_str().unwrap();
    assert!(
        msg.contains("forbidden") && msg.contains(ns.as_str()) && msg.contains("flow"),
        "names the refusal and the identity: {msg}"
    );
    assert!(config_map(&client, &ns, "allowed").await.is_some());
    let secret = Api::<Secret>::namespaced(client.clone(), &ns)
        .get_opt("not-allowed")
        .await
        .unwrap();
    assert!(secret.is_none(), "made with the controller's rights");
    assert!(jobs(&client, &ns).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_keep_their_status_timeouts_and_continue_on_error() {
    let (client, ns, _ctl) = setup("inctl-status", json!([cm_rule()]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "st",
        json!({"serviceAccountName": "flow", "options": {"apiSteps": "Controller"}, "steps": [
            cm("one"), cm("two"),
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "never"}, "condition": "Exist",
             "timeoutSeconds": 2, "continueOnError": true},
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "one"}, "condition": "Exist"},
            cm("three"),
        ]}),
    )
    .await;
    let st = wait_done(&client, &ns, "st", 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let timed_out = step(&st, "spec.steps[2]");
    assert_eq!(timed_out["phase"], "Failed", "{st:#}");
    assert!(
        timed_out["message"]
            .as_str()
            .unwrap()
            .contains("timed out after 2s"),
        "{st:#}"
    );
    for i in [0, 1, 3, 4] {
        let s = step(&st, &format!("spec.steps[{i}]"));
        assert_eq!(s["phase"], "Succeeded", "{st:#}");
        assert!(
            s["startedAt"].is_string() && s["finishedAt"].is_string(),
            "{s:#}"
        );
    }
    assert!(config_map(&client, &ns, "three").await.is_some());
    assert!(jobs(&client, &ns).await.is_empty());
    let said = notes(&client, &ns, "st").await;
    assert!(
        said.iter()
            .any(|n| n.contains("spec.steps[2]") && n.contains("timed out")),
        "{said:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_waiting_when_its_controller_stops_is_run_by_the_next_one() {
    let (client, ns, first) = setup("inctl-restart", json!([cm_rule()]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "wait",
        json!({"serviceAccountName": "flow", "options": {"apiSteps": "Controller"}, "steps": [
            {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "later"}, "condition": "Exist", "timeoutSeconds": 120},
            cm("after"),
        ]}),
    )
    .await;
    wait_status(&client, &ns, "wait", 30, "the wait running", |st| {
        st["steps"].as_array().is_some_and(|s| {
            s.iter()
                .any(|e| e["path"] == "spec.steps[0]" && e["phase"] == "Running")
        })
    })
    .await;
    first.abort();
    let _ = first.await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .patch(
            "later",
            &PatchParams::apply("test"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later"}}),
            ),
        )
        .await
        .unwrap();
    let _second = start_controller(&client, &ns);
    let st = wait_done(&client, &ns, "wait", 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert!(config_map(&client, &ns, "after").await.is_some());
}
