//! A command in another pod (`exec` with `pod`, pods/exec) in a flow recorded in its objects: run
//! by the controller — holding the chart's ClusterRole only — as the flow's ServiceAccount, once,
//! under the object's sealed progress record (docs/bound-flows.md, "A command in another pod runs
//! once"); no child flow and no Job. And the attacks on that record by a tenant who writes their
//! own objects' annotations. (A controller killed mid-run: `chaos.rs`, tests 7 and 8.)

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::Client;
use pseudoflow_controller::approval::Key;
use pseudoflow_controller::bind::served::progress_key;
use serde_json::{json, Value};

use super::in_object::{config_map, in_object_flow};
use crate::common::bound::*;
use crate::common::{apply, create_flow, eventually, grant, MYSQL_IMAGE};

/// Lets ServiceAccount `flow` of `ns` run commands in its pods (pods/exec, and `get` on pods).
async fn allow_exec(client: &Client, ns: &str) {
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "exec", "namespace": ns},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]}]}),
    )
    .await;
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "exec", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "exec"},
            "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]}),
    )
    .await;
}

/// Pod `shell` of `ns`, running: a server that runs until killed, with a shell.
async fn shell_pod(client: &Client, ns: &str) {
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shell", "namespace": ns},
            "spec": {"containers": [{"name": "db", "image": MYSQL_IMAGE,
                "env": [{"name": "MYSQL_ROOT_PASSWORD", "value": "unused"}]}]}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(90, "the shell pod runs", || async {
        let p = pods.get("shell").await.unwrap();
        p.status.and_then(|s| s.phase).as_deref() == Some("Running")
    })
    .await;
}

/// A flow recorded in its objects that says hello from the shell pod into `${said}` (written to
/// the widget's status and a ConfigMap), after `before` (steps).
fn exec_flow(before: Value) -> Value {
    let mut flow = in_object_flow();
    flow["bind"]["status"] = json!({"fields": {"said": "${said}"}});
    let mut steps = before.as_array().cloned().unwrap_or_default();
    steps.insert(
        0,
        json!({"type": "exec", "name": "say", "pod": "shell", "container": "db",
            "cmd": "echo hello-${ object.metadata.name | shq }", "var": "said"}),
    );
    steps.push(json!({"type": "apply", "name": "made", "manifests":
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-said\ndata:\n  said: ${said}\n"}));
    flow["steps"] = Value::Array(steps);
    flow
}

/// The widget's annotation `key`, if it has it.
async fn annotation(client: &Client, ns: &str, name: &str, key: &str) -> Option<String> {
    let w = widgets(client, ns).get(name).await.unwrap();
    w.metadata.annotations.unwrap_or_default().get(key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_in_another_pod_runs_in_the_controller_as_the_flows_account_and_leaves_no_record()
{
    let key = Key::random();
    let (client, ns) = setup_with_key("inobj-exec", all_verbs(), &key).await;
    allow_exec(&client, &ns).await;
    shell_pod(&client, &ns).await;
    create_flow(&client, &ns, "widgets", exec_flow(json!([]))).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    let status = wait_widget(&client, &ns, "w", "Running").await;
    assert_eq!(status["said"], "hello-w", "{status:#}");
    let made = config_map(&client, &ns, "w-said").await;
    assert_eq!(made, Some(json!({"said": "hello-w"})));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let jobs = jobs.list(&Default::default()).await.unwrap().items;
    assert!(jobs.is_empty(), "no Job: {} of them", jobs.len());
    let record = annotation(&client, &ns, "w", &progress_key(&ns, "widgets")).await;
    assert_eq!(record, None, "the run's end removed its progress record");
}

/// The controller's own rights never run the command: without pods/exec for the flow's account
/// the step fails naming that account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_command_the_flows_account_may_not_run_fails_naming_the_account() {
    let key = Key::random();
    let (client, ns) = setup_with_key("inobj-noexec", all_verbs(), &key).await;
    let status = say_hello_and_fail(&client, &ns).await;
    let said = status.to_string();
    assert!(
        said.contains("spec.steps[0]") && said.contains(&format!("{ns}:flow")),
        "{status:#}"
    );
    assert_eq!(config_map(&client, &ns, "w-said").await, None);
}

/// A tenant writes a progress record on their own object: one of their own making, or one the
/// controller sealed for another object (copied while that object's run waited after its
/// command). Neither is believed: each object's command runs, and its own output is what the run
/// goes on with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_progress_record_written_or_copied_by_a_tenant_is_not_believed() {
    let key = Key::random();
    let (client, ns) = setup_with_key("inobj-forge", all_verbs(), &key).await;
    allow_exec(&client, &ns).await;
    // The wait below watches ConfigMaps.
    grant(&client, &ns, &ns, "configmaps", json!(["watch"])).await;
    shell_pod(&client, &ns).await;
    let wait = json!([{"type": "waitFor", "name": "go", "resource": {"kind": "ConfigMap",
        "name": "go"}, "condition": "Exist", "timeoutSeconds": 300}]);
    create_flow(&client, &ns, "widgets", exec_flow(wait)).await;
    let record_key = progress_key(&ns, "widgets");
    create_widget(&client, &ns, "a", json!({"version": "one"})).await;
    // a's run waits after its command: its sealed record names the command as ended.
    let copied = eventually_some(&client, &ns, "a", &record_key).await;
    assert!(
        copied.starts_with("p1.") && !copied.contains("hello"),
        "{copied}"
    );
    let forged = json!({"w": "any", "i": "o1", "a": 0, "v": {"said": "forged"},
        "s": {"instances": {}, "phase": "Succeeded"}})
    .to_string();
    for (name, record) in [("b", copied), ("c", format!("p1.{forged}"))] {
        let mut w = widget().object(&ns, name, json!({"version": "one"}));
        w["metadata"]["annotations"] = json!({&record_key: record});
        apply(&client, w).await;
    }
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "go", "namespace": ns}}),
    )
    .await;
    for name in ["a", "b", "c"] {
        let status = wait_widget(&client, &ns, name, "Running").await;
        assert_eq!(
            status["said"],
            format!("hello-{name}"),
            "{name}: {status:#}"
        );
        let record = annotation(&client, &ns, name, &record_key).await;
        assert_eq!(record, None, "{name}: the run's end removed the record");
        // Served by one run from its first step: no run went on from another's state and
        // failed first (a's run id names its steps).
        let warnings = warnings_about(&client, &ns, name).await;
        assert!(warnings.is_empty(), "{name}: {warnings:#?}");
    }
}

/// The Warning Events about widget `name`.
async fn warnings_about(client: &Client, ns: &str, name: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let fields = format!("involvedObject.kind=Widget,involvedObject.name={name},type=Warning");
    let lp = kube::api::ListParams::default().fields(&fields);
    let items = events.list(&lp).await.unwrap().items;
    items.into_iter().filter_map(|e| e.message).collect()
}

/// Waits up to 60 s for widget `name`'s annotation `key`; its value.
async fn eventually_some(client: &Client, ns: &str, name: &str, key: &str) -> String {
    for _ in 0..120 {
        if let Some(v) = annotation(client, ns, name, key).await {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!("widget {name} has no annotation {key}")
}

/// A controller without its approval key (no `pseudoflow-approval-key` Secret) can seal no
/// progress record: the command does not run, and the object's status says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_approval_key_a_command_does_not_run_and_says_why() {
    let (client, ns) = setup("inobj-nokey", all_verbs()).await;
    allow_exec(&client, &ns).await;
    let status = say_hello_and_fail(&client, &ns).await;
    let said = status.to_string();
    assert!(
        said.contains(
            "spec.steps[0]: the controller has no key to seal the object's progress record"
        ),
        "{status:#}"
    );
    assert_eq!(
        config_map(&client, &ns, "w-said").await,
        None,
        "nothing after it ran"
    );
}

/// The shell pod, the flow saying hello from it, and widget `w`, whose run fails: its status.
async fn say_hello_and_fail(client: &Client, ns: &str) -> Value {
    shell_pod(client, ns).await;
    create_flow(client, ns, "widgets", exec_flow(json!([]))).await;
    create_widget(client, ns, "w", json!({"version": "one"})).await;
    wait_widget(client, ns, "w", "Failed").await
}
