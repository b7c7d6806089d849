//! The `copy` step end to end on a real control plane (testenv): a Secret's selected keys,
//! renamed, reach two other namespaces under the flow's ServiceAccount while its value appears
//! nowhere a reader of the flow's namespace can look (status, Events, pod status and logs,
//! ConfigMaps, the run's own Secrets); and a ServiceAccount that may not read the source fails
//! naming the step, having written nothing.

use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::api::{Api, ListParams, LogParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::{apply, create_flow, flows, prepare, start_controller, wait_done};

/// The secret value; also searched for base64-encoded, as the API stores it.
const CANARY: &str = "copy-canary-5d91e07b";
const CANARY_B64: &str = "Y29weS1jYW5hcnktNWQ5MWUwN2I=";

/// A namespace `<ns>-<suffix>` where ServiceAccount `flow` of `ns` may write Secrets.
async fn target_namespace(client: &Client, ns: &str, suffix: &str) -> String {
    let target = format!("{ns}-{suffix}");
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target}}),
    )
    .await;
    apply(client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "copy-target", "namespace": target},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]}]})).await;
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "copy-target", "namespace": target},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "copy-target"},
        "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]}),
    )
    .await;
    target
}

async fn source_secret(client: &Client, ns: &str) {
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": ns},
        "stringData": {"password": CANARY, "user": "app", "other": "left-behind"}}),
    )
    .await;
}

fn copy_flow(a: &str, b: &str) -> Value {
    json!({"serviceAccountName": "flow", "steps": [{"type": "copy", "name": "share db",
        "from": {"kind": "Secret", "name": "db"},
        "to": [{"namespace": a}, {"namespace": b, "name": "db-copy"}],
        "keys": [{"key": "password"}, {"key": "user", "as": "username"}]}]})
}

fn leaked(v: &impl serde::Serialize) -> bool {
    let text = serde_json::to_string(v).unwrap();
    text.contains(CANARY) || text.contains(CANARY_B64)
}

/// A copy flow that ran to its end: where it copied to, and what its status says.
struct CopyRun {
    client: Client,
    ns: String,
    /// Each target namespace with the name the copy gets there.
    targets: [(String, &'static str); 2],
    status: Value,
    ctl: tokio::task::JoinHandle<()>,
}

/// Runs the copy flow in a fresh namespace whose ServiceAccount `flow` has `rules` there, into
/// two target namespaces, and waits for it to end.
async fn run_copy(prefix: &str, rules: Value) -> CopyRun {
    let (client, ns) = prepare(prefix, rules, json!([])).await;
    let (a, b) = (
        target_namespace(&client, &ns, "a").await,
        target_namespace(&client, &ns, "b").await,
    );
    source_secret(&client, &ns).await;
    let ctl = start_controller(&client, &ns);
    create_flow(&client, &ns, "share", copy_flow(&a, &b)).await;
    let status = wait_done(&client, &ns, "share", 120).await;
    CopyRun {
        client,
        ns,
        targets: [(a, "db"), (b, "db-copy")],
        status,
        ctl,
    }
}

/// The Secret `name` in `target`, if the copy wrote it.
async fn copied(client: &Client, target: &str, name: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(client.clone(), target)
        .get_opt(name)
        .await
        .unwrap()
}

/// Everything in `ns` a reader of the flow could look at that holds the value, by name.
async fn leaks(client: &Client, ns: &str, flow: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lp = ListParams::default();
    for cm in Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
    {
        if leaked(&cm) {
            out.push(format!(
                "ConfigMap {}",
                cm.metadata.name.unwrap_or_default()
            ));
        }
    }
    // The source itself holds it; no other Secret of the flow's (run state, step inputs) may.
    for s in Api::<Secret>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
    {
        let name = s.metadata.name.clone().unwrap_or_default();
        if name != "db" && leaked(&s) {
            out.push(format!("Secret {name}"));
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let listed = pods.list(&lp).await.unwrap().items;
    assert!(!listed.is_empty(), "the copy ran in an executor pod");
    for pod in listed {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if leaked(&pod.status) {
            out.push(format!("status of pod {name}"));
        }
        let log = pods
            .logs(&name, &LogParams::default())
            .await
            .unwrap_or_default();
        if log.contains(CANARY) || log.contains(CANARY_B64) {
            out.push(format!("log of pod {name}"));
        }
    }
    for ev in Api::<Event>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
    {
        if leaked(&ev) {
            out.push(format!("Event {}", ev.reason.unwrap_or_default()));
        }
    }
    let f = flows(client, ns).get(flow).await.unwrap();
    if leaked(&f.data["status"]) {
        out.push("the flow's status".into());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_selected_keys_renamed_into_two_namespaces_without_exposing_the_value() {
    let may_read = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]);
    let CopyRun {
        client,
        ns,
        targets,
        status,
        ctl,
    } = run_copy("copy", may_read).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let message = status["steps"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("password, user→username") && message.contains("2 changed"),
        "{status:#}"
    );
    for (target, name) in &targets {
        let copy = copied(&client, target, name).await.expect("copied");
        let data = copy.data.unwrap_or_default();
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        assert_eq!(keys, ["password", "username"], "{target}/{name}");
        assert_eq!(data["password"].0, CANARY.as_bytes());
        assert_eq!(data["username"].0, b"app");
        let annotations = copy.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations["ops.example.com/copied-from"],
            format!("{ns}/db")
        );
    }
    let found = leaks(&client, &ns, "share").await;
    assert!(found.is_empty(), "the value leaked into: {found:?}");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_that_may_not_read_the_source_fails_naming_the_step_and_writes_nothing() {
    // `flow` may write Secrets in the targets but not read the source.
    let CopyRun {
        client,
        ns,
        targets,
        status,
        ctl,
    } = run_copy("copy-denied", json!([])).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains("spec.steps[0]"), "{status:#}");
    assert!(
        message.contains("forbidden") && message.contains("cannot get secrets \"db\""),
        "{status:#}"
    );
    for (target, name) in &targets {
        let copy = copied(&client, target, name).await;
        assert!(copy.is_none(), "{target}/{name} was written");
    }
    let found = leaks(&client, &ns, "share").await;
    assert!(found.is_empty(), "the value leaked into: {found:?}");
    ctl.abort();
}
