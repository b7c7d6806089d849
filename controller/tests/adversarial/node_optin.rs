//! Attacks on node optin (see main.rs): a user who may only create PseudoFlows in a namespace
//! tries to get root on a node with a `configFile` step. Node steps need the namespace labelled
//! `pod-security.kubernetes.io/enforce=privileged` AND listed in the controller's
//! `--node-step-namespaces`; lacking either, the step fails at once naming its path, the
//! namespace and both requirements, and no node-pinned Job or privileged pod exists. And a
//! flow author tries to run as a ServiceAccount the cluster admin did not mean flows to use: the
//! chart's optional ValidatingAdmissionPolicy refuses the flow on the real API server.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::api::eventually;
use crate::common::{
    apply, create_flow, env, flows, label_privileged, prepare, start_controller_allowing,
    start_node_controller, wait_done,
};

/// A namespace whose flow ServiceAccount `flow` may list nodes (what a node fan-out needs).
async fn namespace(prefix: &str) -> (Client, String) {
    let node_reader =
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]);
    prepare(prefix, json!([]), node_reader).await
}

/// The file the flow writes, relative to a node's root.
fn file(ns: &str) -> String {
    format!("etc/pseudoflow-test/optin-{ns}.conf")
}

/// Creates flow `root` writing [`file`] on the worker nodes and waits for its end.
async fn write_on_workers(client: &Client, ns: &str) -> Value {
    create_flow(
        client,
        ns,
        "root",
        json!({"serviceAccountName": "flow", "steps": [{
            "type": "configFile", "nodeSelector": "!node-role.kubernetes.io/control-plane",
            "path": format!("/{}", file(ns)), "content": "opted in\n",
        }]}),
    )
    .await;
    wait_done(client, ns, "root", 90).await
}

/// The nodes whose root holds [`file`].
fn nodes_with_file(ns: &str) -> Vec<&'static str> {
    ["cp-0", "worker-0", "worker-1"]
        .into_iter()
        .filter(|n| env().node_root(n).join(file(ns)).exists())
        .collect()
}

/// Asserts the flow failed at its node step with the opt-in message and left nothing on nodes.
async fn assert_refused(client: &Client, ns: &str, status: &Value) {
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap_or_default();
    for part in [
        "spec.steps[0]",
        &format!("namespace {ns:?}"),
        "pod-security.kubernetes.io/enforce=privileged",
        "--node-step-namespaces",
        "nodeSteps.namespaces",
    ] {
        assert!(message.contains(part), "message lacks {part:?}: {message}");
    }
    let pinned = crate::common::pinned_nodes(client, ns).await;
    assert!(
        pinned.is_empty(),
        "node-pinned Jobs were created: {pinned:?}"
    );
    let privileged: Vec<String> = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.spec.as_ref().is_some_and(|s| {
                s.host_pid == Some(true)
                    || s.containers.iter().any(|c| {
                        c.security_context
                            .as_ref()
                            .and_then(|sc| sc.privileged)
                            .unwrap_or(false)
                    })
            })
        })
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(privileged.is_empty(), "privileged pods: {privileged:?}");
    assert_eq!(
        nodes_with_file(ns),
        Vec::<&str>::new(),
        "a node was changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlabelled_and_not_allowed_namespace_gets_no_root_on_nodes() {
    let (client, ns) = namespace("optin-none").await;
    let ctl = start_controller_allowing(&client, &ns, &["kube-system"]);
    let status = write_on_workers(&client, &ns).await;
    assert_refused(&client, &ns, &status).await;
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("it has no pod-security.kubernetes.io/enforce label")
            && message.contains("it is not in the controller's --node-step-namespaces"),
        "names both missing halves: {message}"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileged_label_alone_is_not_an_opt_in() {
    let (client, ns) = namespace("optin-label").await;
    label_privileged(&client, &ns).await;
    let ctl = start_controller_allowing(&client, &ns, &["kube-system"]);
    let status = write_on_workers(&client, &ns).await;
    assert_refused(&client, &ns, &status).await;
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("it is not in the controller's --node-step-namespaces")
            && !message.contains("it has no"),
        "names the allow-list only: {message}"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_list_alone_is_not_an_opt_in() {
    let (client, ns) = namespace("optin-list").await;
    let ctl = start_controller_allowing(&client, &ns, &[&ns]);
    let status = write_on_workers(&client, &ns).await;
    assert_refused(&client, &ns, &status).await;
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("it has no pod-security.kubernetes.io/enforce label")
            && !message.contains("it is not in"),
        "names the label only: {message}"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_and_allow_list_together_run_the_node_step() {
    let (client, ns) = namespace("optin-both").await;
    let ctl = start_node_controller(&client, &ns).await;
    let status = write_on_workers(&client, &ns).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(nodes_with_file(&ns), ["worker-0", "worker-1"]);
    ctl.abort();
}

/// The chart's admission policy and binding for release `release`, allowing `accounts` and
/// checking only namespace `ns` (so the other tests sharing this cluster are not affected).
fn render_policy(release: &str, ns: &str, accounts: &[&str]) -> Vec<Value> {
    let selector = json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    pseudoflow_test_support::helm::template(
        release,
        &[
            "--show-only".into(),
            "templates/admission-policy.yaml".into(),
            "--set".into(),
            "admissionPolicy.enabled=true".into(),
            "--set-json".into(),
            format!("admissionPolicy.serviceAccounts={}", json!(accounts)),
            "--set-json".into(),
            format!("admissionPolicy.namespaceSelector={selector}"),
        ],
    )
}

/// A PseudoFlow `name` with one log step, running as `account` (`None`: names none).
fn flow_as(ns: &str, name: &str, account: Option<&str>) -> DynamicObject {
    let mut spec = json!({"steps": [{"type": "log", "message": "hello"}]});
    if let Some(a) = account {
        spec["serviceAccountName"] = json!(a);
    }
    serde_json::from_value(
        json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "metadata": {"name": name, "namespace": ns}, "spec": spec}),
    )
    .unwrap()
}

/// The API server's refusal of creating `flow` (panics if it was admitted).
async fn refusal(api: &Api<DynamicObject>, flow: &DynamicObject) -> String {
    match api.create(&PostParams::default(), flow).await {
        Ok(_) => panic!("flow {:?} was admitted", flow.metadata.name),
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403, "{e:?}");
            e.message
        }
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_admission_policy_refuses_a_flow_naming_a_service_account_not_allowed() {
    let (client, ns) = namespace("optin-vap").await;
    let release = format!("pf-{ns}");
    let docs = render_policy(&release, &ns, &["flow", "elsewhere/ops"]);
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    for d in &docs {
        apply(&client, d.clone()).await;
    }
    let api = flows(&client, &ns);
    // The API server loads policies asynchronously: wait until it enforces this one.
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually(30, "the policy is enforced", || async {
        api.create(&dry_run, &flow_as(&ns, "probe", Some("intruder")))
            .await
            .is_err()
    })
    .await;

    let message = refusal(&api, &flow_as(&ns, "as-intruder", Some("intruder"))).await;
    assert!(
        message.contains(&format!("ServiceAccount {ns}/intruder"))
            && message.contains("spec.serviceAccountName")
            && message.contains("admissionPolicy.serviceAccounts"),
        "{message}"
    );
    // A flow naming no account runs as `default`, which is not allowed either.
    let message = refusal(&api, &flow_as(&ns, "as-default", None)).await;
    assert!(message.contains(&format!("{ns}/default")), "{message}");
    // "elsewhere/ops" allows ops in namespace elsewhere only.
    refusal(&api, &flow_as(&ns, "as-ops", Some("ops"))).await;
    // The allowed account is admitted; switching an admitted flow to another account is not.
    api.create(
        &PostParams::default(),
        &flow_as(&ns, "as-flow", Some("flow")),
    )
    .await
    .expect("a flow naming an allowed ServiceAccount is admitted");
    let mut edited = api.get("as-flow").await.unwrap();
    edited.data["spec"]["serviceAccountName"] = json!("intruder");
    let err = api
        .replace("as-flow", &PostParams::default(), &edited)
        .await
        .expect_err("switching to a ServiceAccount not allowed is refused");
    assert!(err.to_string().contains("intruder"), "{err}");

    for d in docs.iter().rev() {
        let name = d["metadata"]["name"].as_str().unwrap();
        let ar = kube::discovery::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            d["kind"].as_str().unwrap(),
        ));
        let _ = Api::<DynamicObject>::all_with(client.clone(), &ar)
            .delete(name, &DeleteParams::default())
            .await;
    }
}
