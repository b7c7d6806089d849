//! A namespace editor (a user bound to the `edit` ClusterRole in the flow's namespace: Secrets
//! yes, PseudoFlows and their status no) rewrites the flow's run-state Secret: marks a waiting
//! approval Succeeded, injects a step, changes the stored `serviceAccountName`, or puts back an
//! older state the controller did write. None of it is driven: the run fails
//! `RunStateTampered`, a Warning Event names the Secret's last writer, and what the rewrite
//! asked for does not happen.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::admin_config;
use crate::common::harness::{config_map, create_flow, setup_with};
use crate::common::{flow_events, flows, wait_status};

/// The field manager the editor's writes carry (as `kubectl edit` carries `kubectl-edit`).
const EDITOR_MANAGER: &str = "mallory-edit";

fn manifest(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}})
}

/// A namespace whose flow ServiceAccount may manage ConfigMaps, with a controller; and a client
/// for user `mallory`, bound to the `edit` ClusterRole there.
async fn setup(prefix: &str) -> (Client, String, Client) {
    setup_allowing(
        prefix,
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]),
    )
    .await
}

/// Binds `subject` (a User or ServiceAccount) to the `edit` ClusterRole in `ns`.
async fn bind_edit(client: &Client, ns: &str, subject: Value) {
    let name = format!("edit-{}", subject["name"].as_str().unwrap());
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [subject],
    });
    pseudoflow_testenv::apply::apply_value(client, binding, None)
        .await
        .unwrap();
}

/// [`setup`] with the flow ServiceAccount's `rules`.
async fn setup_allowing(prefix: &str, rules: Value) -> (Client, String, Client) {
    let (client, ns) = setup_with(prefix, rules).await;
    let user = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"});
    bind_edit(&client, &ns, user).await;
    let mut config = admin_config().await;
    config.auth_info.impersonate = Some("mallory".into());
    let mallory = Client::try_from(config).unwrap();
    (client, ns, mallory)
}

/// The flow's run-state Secret, as `who` reads it.
async fn run_state(who: &Client, ns: &str) -> Secret {
    Api::<Secret>::namespaced(who.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|s| s.type_.as_deref() == Some("ops.example.com/run-state"))
        .expect("the run state is a Secret")
}

fn document(secret: &Secret) -> Value {
    serde_json::from_slice(&secret.data.as_ref().unwrap()["run.json"].0).unwrap()
}

/// Replaces the run-state Secret's data as the editor would: `data` as it is, or `run.json`
/// rewritten by `edit` (its other fields, the seal included, left as they are).
async fn write_as_editor(
    mallory: &Client,
    ns: &str,
    data: Option<Secret>,
    edit: impl Fn(&mut Value),
) {
    let mut secret = run_state(mallory, ns).await;
    match data {
        Some(older) => secret.data = older.data,
        None => {
            let mut doc = document(&secret);
            edit(&mut doc);
            let bytes = ByteString(serde_json::to_vec(&doc).unwrap());
            secret
                .data
                .as_mut()
                .unwrap()
                .insert("run.json".into(), bytes);
        }
    }
    let pp = PostParams {
        field_manager: Some(EDITOR_MANAGER.into()),
        ..Default::default()
    };
    let name = secret.metadata.name.clone().unwrap();
    Api::<Secret>::namespaced(mallory.clone(), ns)
        .replace(&name, &pp, &secret)
        .await
        .expect("the edit role may update Secrets");
}

/// Any change to the flow makes the controller reconcile it (as its resync would).
async fn poke(client: &Client, ns: &str, name: &str, value: &str) {
    let patch = json!({"metadata": {"annotations": {"test.example.com/poke": value}}});
    flows(client, ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// The `status.steps` entry of the step at `path`, or null while it has none.
fn entry<'a>(status: &'a Value, path: &str) -> &'a Value {
    const NONE: &Value = &Value::Null;
    status["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|e| e["path"] == path))
        .unwrap_or(NONE)
}

/// Waits for `RunStateTampered` and checks the Warning Event names the editor's writes.
async fn assert_refused(client: &Client, ns: &str, name: &str) -> Value {
    let status = wait_status(client, ns, name, 60, "RunStateTampered", |s| {
        s["reason"] == "RunStateTampered"
    })
    .await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let events = flow_events(client, ns, name).await;
    let warning = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("RunStateTampered"))
        .unwrap_or_else(|| panic!("a RunStateTampered Event: {events:#?}"));
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let note = warning.message.clone().unwrap_or_default();
    assert!(
        note.contains(EDITOR_MANAGER),
        "names the last writer: {note}"
    );
    status
}

/// A flow whose approval gate waits, with the step after it creating ConfigMap `after`.
async fn gated_flow(client: &Client, ns: &str, name: &str) -> Value {
    create_flow(
        client,
        ns,
        name,
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "approval", "name": "gate"},
            {"type": "apply", "manifests": [manifest(ns, "after")]},
        ]}),
    )
    .await;
    wait_status(client, ns, name, 60, "the gate waiting", |s| {
        entry(s, "spec.steps[0]")["phase"] == "Running"
    })
    .await
}

#[tokio::test]
async fn an_editor_marking_the_approval_succeeded_does_not_open_the_gate() {
    let (client, ns, mallory) = setup("rs-skip").await;
    gated_flow(&client, &ns, "gated").await;
    write_as_editor(&mallory, &ns, None, |doc| {
        let gate = &mut doc["state"]["instances"]["s0"];
        gate["phase"] = json!("Succeeded");
        gate["approval"] =
            json!({"decision": "Approved", "user": "boss", "time": "2026-01-01T00:00:00Z"});
    })
    .await;
    poke(&client, &ns, "gated", "1").await;
    let status = assert_refused(&client, &ns, "gated").await;
    assert_ne!(entry(&status, "spec.steps[0]")["approval"]["user"], "boss");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        config_map(&client, &ns, "after").await.is_none(),
        "the step after the gate ran"
    );
}

#[tokio::test]
async fn an_editor_injecting_a_step_into_the_stored_spec_runs_nothing() {
    let (client, ns, mallory) = setup("rs-inject").await;
    gated_flow(&client, &ns, "gated").await;
    let injected = manifest(&ns, "injected");
    write_as_editor(&mallory, &ns, None, |doc| {
        // The stored spec starts with the injected step, and the run starts afresh.
        doc["spec"]["steps"] = json!([{"type": "apply", "manifests": [injected.clone()]}]);
        doc["state"]["instances"] = json!({});
    })
    .await;
    poke(&client, &ns, "gated", "1").await;
    assert_refused(&client, &ns, "gated").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        config_map(&client, &ns, "injected").await.is_none(),
        "the injected step ran"
    );
}

#[tokio::test]
async fn an_editor_changing_the_stored_service_account_runs_nothing_as_it() {
    // The flow's own ServiceAccount may only read ConfigMaps; `powerful` may edit the namespace.
    let (client, ns, mallory) = setup_allowing(
        "rs-sa",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "powerful", "namespace": ns}});
    pseudoflow_testenv::apply::apply_value(&client, sa, None)
        .await
        .unwrap();
    let powerful = json!({"kind": "ServiceAccount", "name": "powerful", "namespace": ns});
    bind_edit(&client, &ns, powerful).await;
    create_flow(
        &client,
        &ns,
        "waits",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "sleep", "seconds": 8},
            {"type": "apply", "manifests": [manifest(&ns, "after")]},
        ]}),
    )
    .await;
    wait_status(&client, &ns, "waits", 30, "the sleep running", |s| {
        entry(s, "spec.steps[0]")["phase"] == "Running"
    })
    .await;
    write_as_editor(&mallory, &ns, None, |doc| {
        doc["spec"]["serviceAccountName"] = json!("powerful");
    })
    .await;
    poke(&client, &ns, "waits", "1").await;
    assert_refused(&client, &ns, "waits").await;
    // Past the sleep's end: nothing more of the run was driven, as `powerful` or otherwise
    // (as `flow`, the apply would be forbidden; as `powerful`, it makes `after`).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let status = flows(&client, &ns).get("waits").await.unwrap().data["status"].clone();
    assert_eq!(status["reason"], "RunStateTampered", "{status:#}");
    assert!(config_map(&client, &ns, "after").await.is_none());
}

#[tokio::test]
async fn an_editor_putting_back_an_older_state_of_the_controllers_is_refused() {
    let (client, ns, mallory) = setup("rs-replay").await;
    gated_flow(&client, &ns, "gated").await;
    let older = run_state(&mallory, &ns).await;
    // A decision without the webhook's stamp is not accepted, and the step's message says so:
    // the controller stores a newer state.
    let patch = json!({"metadata": {"annotations": {"ops.example.com/approve": "gate"}}});
    flows(&client, &ns)
        .patch("gated", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    wait_status(&client, &ns, "gated", 30, "the decision refused", |s| {
        entry(s, "spec.steps[0]")["message"]
            .as_str()
            .is_some_and(|m| m.contains("not accepted"))
    })
    .await;
    let newer = run_state(&mallory, &ns).await;
    assert_ne!(
        document(&newer),
        document(&older),
        "a newer state was stored"
    );
    write_as_editor(&mallory, &ns, Some(older), |_| {}).await;
    poke(&client, &ns, "gated", "1").await;
    let status = assert_refused(&client, &ns, "gated").await;
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains("older state"), "{message}");
}

/// A namespace editor deletes a finished flow's run-state Secret (the `edit` role may): the
/// controller does not run that run again from scratch — its steps would repeat — but fails the
/// flow `RunStateMissing`, saying how to start a new run; a new run annotation value (what
/// `kubectl pf run` sets) then runs the flow anew.
#[tokio::test]
async fn an_editor_deleting_a_finished_runs_state_does_not_make_it_run_again() {
    let (client, ns, mallory) = setup("rs-delete").await;
    let steps = json!([{"type": "apply", "manifests": [manifest(&ns, "made")]}]);
    let spec = json!({"serviceAccountName": "flow", "options": {"apiSteps": "Controller"},
        "steps": steps});
    create_flow(&client, &ns, "once", spec).await;
    wait_status(&client, &ns, "once", 60, "Succeeded", |s| {
        s["phase"] == "Succeeded"
    })
    .await;
    // What the run made is gone; were the run started again, it would be made again.
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
        .delete("made", &Default::default())
        .await
        .unwrap();
    let secret = run_state(&mallory, &ns).await;
    let name = secret.metadata.name.clone().unwrap();
    Api::<Secret>::namespaced(mallory.clone(), &ns)
        .delete(&name, &Default::default())
        .await
        .expect("the edit role may delete Secrets");
    poke(&client, &ns, "once", "1").await;
    let status = wait_status(&client, &ns, "once", 60, "RunStateMissing", |s| {
        s["reason"] == "RunStateMissing"
    })
    .await;
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&name) && message.contains("kubectl pf run once"),
        "{status:#}"
    );
    poke(&client, &ns, "once", "2").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        config_map(&client, &ns, "made").await.is_none(),
        "the run was not run again"
    );
    // A new run, asked for.
    let patch = json!({"metadata": {"annotations": {"ops.example.com/run": "again"}}});
    flows(&client, &ns)
        .patch("once", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    wait_status(&client, &ns, "once", 60, "the new run Succeeded", |s| {
        s["phase"] == "Succeeded" && s["run"]["trigger"] == "again"
    })
    .await;
    assert!(config_map(&client, &ns, "made").await.is_some());
}
