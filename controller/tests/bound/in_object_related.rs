//! Related objects (`bind.related`) of a flow recorded in its objects (issue #41): with
//! `record` unset such a flow takes the fast path (no child flow); a change of a related
//! Secret's content runs the object again naming it in `${trigger.changed}`, a change of its
//! labels runs nothing; the Secret's data never reaches the object's annotations or status; a
//! related Secret the flow's account may not get (or a reference that names nothing) leaves the
//! object unserved naming `spec.bind.related[0]`; after a controller restart a metadata-only
//! change runs each object at most once more.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::bound::*;
use crate::common::{apply, create_flow, eventually, flows, wait_status};
use crate::in_object::{assert_recorded_in_object, config_map, mark_of, start_controller};

/// The Secret's data, as written and as the API stores it (base64): neither may appear in
/// anything the flow writes.
const TOKEN_ONE: &str = "s3cr3t-token-one";
const TOKEN_TWO: &str = "s3cr3t-token-two";
/// [`TOKEN_ONE`] and [`TOKEN_TWO`] in base64, as a Secret's `data` holds them.
const STORED: [&str; 2] = ["czNjcjN0LXRva2VuLW9uZQ==", "czNjcjN0LXRva2VuLXR3bw=="];

/// A bound flow over widgets naming a Secret (`spec.secret`), with no `bind.record`: its one
/// step (run in the controller) writes ConfigMap `<widget>-seen` holding what started the run.
fn related_flow() -> Value {
    json!({
        "serviceAccountName": "flow",
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
            "related": [{"apiVersion": "v1", "kind": "Secret", "name": "${object.spec.secret}"}]},
        "steps": [
            {"type": "apply", "name": "seen", "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-seen\ndata:\n  event: ${trigger.event}\n  changed: \"${trigger.changed | join(',')}\"\n"}
        ]
    })
}

fn secrets(client: &Client, ns: &str) -> Api<Secret> {
    Api::namespaced(client.clone(), ns)
}

/// Creates Secret `name` holding `token`.
async fn create_secret(client: &Client, ns: &str, name: &str, token: &str) {
    let s = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns}, "stringData": {"token": token}});
    apply(client, s).await;
}

/// Merge-patches Secret `name`.
async fn patch_secret(client: &Client, ns: &str, name: &str, patch: Value) {
    let pp = PatchParams::default();
    secrets(client, ns)
        .patch(name, &pp, &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Deletes ConfigMap `<widget>-seen`, so that any later run shows by making it again.
async fn forget_seen(client: &Client, ns: &str, widget: &str) {
    let api = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns);
    api.delete(&format!("{widget}-seen"), &DeleteParams::default())
        .await
        .unwrap();
    eventually(10, "the seen ConfigMap gone", || async {
        config_map(client, ns, &format!("{widget}-seen"))
            .await
            .is_none()
    })
    .await;
}

/// Waits for a run of `widget` started by `event` naming `changed`.
async fn wait_seen(client: &Client, ns: &str, widget: &str, event: &str, changed: &str) {
    let what = format!("{widget} run by {event} [{changed}]");
    eventually(30, &what, || async {
        let seen = config_map(client, ns, &format!("{widget}-seen")).await;
        seen.is_some_and(|s| s["event"] == event && s["changed"] == changed)
    })
    .await;
}

/// Secret `src` holding [`TOKEN_ONE`], which the flows' ServiceAccount may read.
async fn readable_src(client: &Client, ns: &str) {
    crate::may_read_secrets(client, ns).await;
    create_secret(client, ns, "src", TOKEN_ONE).await;
}

/// Creates [`related_flow`] and widget `w` naming Secret `src`, and waits for its first run.
async fn serve_w(client: &Client, ns: &str) {
    create_flow(client, ns, "widgets", related_flow()).await;
    create_widget(client, ns, "w", json!({"secret": "src"})).await;
    wait_seen(client, ns, "w", "create", "").await;
}

/// The related versions recorded in widget `name`'s served mark (`l`).
async fn marked_related(client: &Client, ns: &str, name: &str) -> Value {
    let raw = mark_of(client, ns, name).await.unwrap_or_default();
    let m: Value = serde_json::from_str(&raw).unwrap_or_default();
    m["l"].clone()
}

/// Asserts that nothing of the Secret's data is in widget `name` nor in flow `widgets`.
async fn assert_no_secret_data(client: &Client, ns: &str, name: &str) {
    let w = widgets(client, ns).get(name).await.unwrap();
    let f = flows(client, ns).get("widgets").await.unwrap();
    let text = format!(
        "{} {} {}",
        json!(w.metadata.annotations),
        w.data["status"],
        f.data["status"]
    );
    for token in [TOKEN_ONE, TOKEN_TWO].into_iter().chain(STORED) {
        assert!(!text.contains(token), "{token} leaked: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_related_secrets_content_change_runs_its_object_in_itself_and_its_labels_do_not() {
    let (client, ns) = setup("inobj-related", all_verbs()).await;
    readable_src(&client, &ns).await;
    serve_w(&client, &ns).await;
    wait_widget(&client, &ns, "w", "Running").await;
    assert_recorded_in_object(&client, &ns, "w").await;
    // The mark records the Secret's resourceVersion, under a digest of its key.
    let version = || async {
        let s = secrets(&client, &ns).get("src").await.unwrap();
        s.metadata.resource_version.unwrap()
    };
    let now = version().await;
    eventually(30, "the Secret's version in the mark", || async {
        let l = marked_related(&client, &ns, "w").await;
        l.as_object()
            .is_some_and(|l| l.len() == 1 && l.values().all(|v| *v == json!(now)))
    })
    .await;

    // Its labels are metadata: no run (which would make `w-seen` again).
    forget_seen(&client, &ns, "w").await;
    patch_secret(
        &client,
        &ns,
        "src",
        json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        config_map(&client, &ns, "w-seen").await.is_none(),
        "a label on the related Secret starts no run"
    );

    // Its content: a run within seconds (the watch, not the resync), naming it.
    let started = std::time::Instant::now();
    patch_secret(
        &client,
        &ns,
        "src",
        json!({"stringData": {"token": TOKEN_TWO}}),
    )
    .await;
    wait_seen(&client, &ns, "w", "update", "Secret/src").await;
    assert!(started.elapsed() < Duration::from_secs(20));
    let now = version().await;
    eventually(30, "the new version in the mark", || async {
        let l = marked_related(&client, &ns, "w").await;
        l.as_object()
            .is_some_and(|l| l.values().all(|v| *v == json!(now)))
    })
    .await;
    assert_no_secret_data(&client, &ns, "w").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_related_secret_the_account_may_not_get_leaves_its_object_unserved_naming_it() {
    // The account may list and watch Secrets, but get only `shared`; the controller itself may
    // get every Secret (the chart's ClusterRole), so a read with its rights would succeed.
    let (client, ns) = setup("inobj-related-get", all_verbs()).await;
    crate::may_get_only_shared_secret(&client, &ns).await;
    create_secret(&client, &ns, "shared", TOKEN_ONE).await;
    create_secret(&client, &ns, "private", TOKEN_TWO).await;
    create_flow(&client, &ns, "widgets", related_flow()).await;
    create_widget(&client, &ns, "allowed", json!({"secret": "shared"})).await;
    create_widget(&client, &ns, "denied", json!({"secret": "private"})).await;
    create_widget(&client, &ns, "nameless", json!({"other": "x"})).await;
    wait_seen(&client, &ns, "allowed", "create", "").await;
    let failure_of = |status: &Value, name: &str| -> Option<String> {
        let failures = status["bound"]["failures"].as_array()?;
        let f = failures
            .iter()
            .find(|f| f["object"] == format!("{ns}/{name}"))?;
        f["message"].as_str().map(String::from)
    };
    let status = wait_status(&client, &ns, "widgets", 60, "both refused", |s| {
        failure_of(s, "denied").is_some() && failure_of(s, "nameless").is_some()
    })
    .await;
    assert_eq!(status["bound"]["record"], "Object", "{status:#}");
    let denied = failure_of(&status, "denied").unwrap();
    assert!(
        denied.starts_with(&format!(
            "spec.bind.related[0] (Secret/private): ServiceAccount {ns}/flow may not get \
             secrets in namespace {ns}"
        )),
        "{denied}"
    );
    let nameless = failure_of(&status, "nameless").unwrap();
    assert!(
        nameless.starts_with("spec.bind.related[0].name"),
        "{nameless}"
    );
    // Refused before anything runs: no run, no mark.
    for name in ["denied", "nameless"] {
        assert!(config_map(&client, &ns, &format!("{name}-seen"))
            .await
            .is_none());
        assert!(mark_of(&client, &ns, name).await.is_none(), "{name} marked");
    }
    assert_no_secret_data(&client, &ns, "denied").await;
}

/// The content digest lives in the controller's memory only: a controller restarted after a
/// label change of the related Secret runs the object once more (the mark's version is not
/// the Secret's any longer), then no more for the next label change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_related_metadata_change_runs_each_object_at_most_once_more() {
    let client = crate::common::env().client().await.unwrap();
    crate::common::install_crd(&client).await;
    apply(&client, widget().crd()).await;
    let ns = crate::common::FlowNamespace::new("inobj-related-restart")
        .rules(flow_rules(all_verbs()))
        .create(crate::common::env(), &client)
        .await;
    wait_served(&client, &ns).await;
    readable_src(&client, &ns).await;
    let first = start_controller(&client, &ns).await;
    serve_w(&client, &ns).await;
    eventually(30, "the mark", || async {
        marked_related(&client, &ns, "w").await.is_object()
    })
    .await;
    first.abort();
    let _ = first.await;

    forget_seen(&client, &ns, "w").await;
    let label = |v: &str| json!({"metadata": {"labels": {"x": v}}});
    patch_secret(&client, &ns, "src", label("1")).await;
    let _second = start_controller(&client, &ns).await;
    wait_seen(&client, &ns, "w", "update", "Secret/src").await;

    forget_seen(&client, &ns, "w").await;
    patch_secret(&client, &ns, "src", label("2")).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        config_map(&client, &ns, "w-seen").await.is_none(),
        "remembered again: a label starts no run"
    );
    assert_no_secret_data(&client, &ns, "w").await;
}
