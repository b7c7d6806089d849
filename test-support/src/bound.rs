//! Flows bound to a kind (`spec.bind`) as their tests run them: a test kind `Widget`, a
//! namespace whose flow ServiceAccount may act on widgets, and a controller for it running as a
//! ServiceAccount with the chart's ClusterRole and nothing else (so everything done to the
//! objects is done as the flow's ServiceAccount, by impersonation).

use std::sync::Arc;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::Client;
use pseudoflow_controller::approval::Key;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{run_controller, Context};
use serde_json::{json, Value};

use crate::{apply, env, eventually, install_crd, FlowNamespace, TestKind, IMAGE};

/// The API group of the tests' kind `Widget`.
pub const GROUP: &str = "bind.test.example.com";

/// A kind for these tests whose status keeps any field (the seed's CRD keeps only `phase`).
pub fn widget() -> TestKind {
    TestKind::new(GROUP, "Widget")
}

/// The widgets of `ns`.
pub fn widgets(client: &Client, ns: &str) -> Api<DynamicObject> {
    widget().api(client, ns)
}

/// Creates (applies) widget `name` in `ns` with `spec`.
pub async fn create_widget(client: &Client, ns: &str, name: &str, spec: Value) {
    apply(client, widget().object(ns, name, spec)).await;
}

/// The rights a bound flow's ServiceAccount needs on widgets, plus ConfigMaps for its steps.
pub fn flow_rules(widget_verbs: Value) -> Value {
    json!([
        {"apiGroups": [GROUP], "resources": ["widgets"], "verbs": widget_verbs},
        {"apiGroups": [GROUP], "resources": ["widgets/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch", "delete"]},
    ])
}

/// A namespace whose ServiceAccount `flow` may do `widget_verbs` on widgets, and a controller
/// for it running as a ServiceAccount with the chart's ClusterRole and nothing else.
pub async fn setup(prefix: &str, widget_verbs: Value) -> (Client, String) {
    let (client, ns, _) = setup_with_context(prefix, widget_verbs).await;
    (client, ns)
}

/// [`setup`], with the controller's context (to see its watches).
pub async fn setup_with_context(
    prefix: &str,
    widget_verbs: Value,
) -> (Client, String, Arc<Context>) {
    setup_controller(prefix, widget_verbs, None).await
}

/// [`setup`], its controller holding the approval `key`: it accepts the rollout actions (and
/// approvals) the admission webhooks stamp with it ([`crate::admission::start_webhooks`]).
pub async fn setup_with_key(prefix: &str, widget_verbs: Value, key: &Key) -> (Client, String) {
    let (client, ns, _) = setup_controller(prefix, widget_verbs, Some(key)).await;
    (client, ns)
}

/// [`setup`], its controller holding `key` when given; with its context.
async fn setup_controller(
    prefix: &str,
    widget_verbs: Value,
    key: Option<&Key>,
) -> (Client, String, Arc<Context>) {
    let client = env().client().await.unwrap();
    install_crd(&client).await;
    apply(&client, widget().crd()).await;
    let ns = FlowNamespace::new(prefix)
        .rules(flow_rules(widget_verbs))
        .create(env(), &client)
        .await;
    wait_served(&client, &ns).await;
    let config = controller_config(&client, &ns).await;
    let ctl = Client::try_from(config.clone()).unwrap();
    assert!(
        !may(
            &client,
            &format!("system:serviceaccount:{ns}:controller"),
            &ns,
            "list"
        )
        .await,
        "the controller must hold no rights on the kind"
    );
    let mut ctx = Context::new(ctl, IMAGE.into(), Arc::new(Metrics::default())).with_config(config);
    if let Some(key) = key {
        ctx = ctx.with_approval_key(key.clone());
    }
    let ctx = Arc::new(ctx);
    tokio::spawn(run_controller(ctx.clone(), Some(ns.clone())));
    (client, ns, ctx)
}

/// Waits until the API server serves widgets in `ns`.
pub async fn wait_served(client: &Client, ns: &str) {
    let api = widgets(client, ns);
    eventually(30, "widgets served", || async {
        api.list(&Default::default()).await.is_ok()
    })
    .await;
}

/// The chart's ClusterRole (rendered by helm), bound to ServiceAccount `controller` of `ns`;
/// a client configuration with a token of that account (the testenv admin's certificate gone).
pub async fn controller_config(client: &Client, ns: &str) -> kube::Config {
    controller_config_in(env(), client, ns).await
}

/// [`controller_config`] on the cluster `env` (a test's own cluster, not the shared one).
pub async fn controller_config_in(
    env: &pseudoflow_testenv::TestEnv,
    client: &Client,
    ns: &str,
) -> kube::Config {
    let docs = crate::helm::template(
        "bind",
        &[
            "--show-only".into(),
            "templates/rbac.yaml".into(),
            "--set".into(),
            "leaderElection.enabled=false".into(),
        ],
    );
    let role = docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    let name = format!("pseudoflow-bind-{ns}");
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": role["rules"]}),
    )
    .await;
    apply(client, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "controller", "namespace": ns}})).await;
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": ns}]}),
    )
    .await;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let req: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let token = sas
        .create_token_request("controller", &PostParams::default(), &req)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig_path()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
    config.auth_info = AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    config
}

/// Whether `user` may `verb` widgets in `ns` (asked as the admin).
pub async fn may(client: &Client, user: &str, ns: &str, verb: &str) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some("widgets".into()),
                verb: Some(verb.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
        .allowed
}

/// A bound flow `name` over widgets: it applies ConfigMap `<widget>-made` holding the widget's
/// `spec.version` (a version that is no valid name part fails the step), counts runs started
/// by create in ConfigMap `<widget>-created` (a loop over one item on create, none otherwise),
/// and its onDelete applies `<widget>-farewell`. Recorded in a child flow per widget unless
/// `extra_bind` says otherwise (every step could run in the controller, so unset it would be
/// recorded in the widgets).
pub fn widget_flow(extra_bind: Value) -> Value {
    let mut bind = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
        "record": "Child", "status": {"fields": {"made": "${object.metadata.name}-made"}}});
    if let (Some(b), Some(extra)) = (bind.as_object_mut(), extra_bind.as_object()) {
        b.extend(extra.clone());
    }
    json!({
        "serviceAccountName": "flow",
        "bind": bind,
        "steps": [
            {"type": "apply", "name": "made", "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-made-${object.spec.version}\n  labels: {widget: \"${object.metadata.name}\"}\ndata:\n  event: ${trigger.event}\n"},
            {"type": "loop", "name": "on create only", "forEach": "${['once'] if trigger.event == 'create' else []}", "steps": [
                {"type": "apply", "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-created\n"}
            ]}
        ],
        "onDelete": [
            {"type": "apply", "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-farewell\n"}
        ]
    })
}

/// Widget `name`'s status (null when it has none or is gone).
pub async fn widget_status(client: &Client, ns: &str, name: &str) -> Value {
    widgets(client, ns)
        .get(name)
        .await
        .map(|w| w.data["status"].clone())
        .unwrap_or_default()
}

/// Waits up to 90 s for widget `name`'s status phase to be `phase`; its status.
pub async fn wait_widget(client: &Client, ns: &str, name: &str, phase: &str) -> Value {
    let what = format!("widget {name} phase {phase}");
    eventually(90, &what, || async {
        widget_status(client, ns, name).await["phase"] == phase
    })
    .await;
    widget_status(client, ns, name).await
}

/// Whether ConfigMap `name` exists in `ns` (the approval tests' helper, which the bound ones
/// use as well).
pub use crate::approval::config_map_exists;

/// Every verb a bound flow's ServiceAccount needs on widgets.
pub fn all_verbs() -> Value {
    json!(["get", "list", "watch", "patch"])
}
