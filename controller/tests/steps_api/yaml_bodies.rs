//! `${...}` in YAML bodies read at run time (seed §6: "in all string fields of steps and in the
//! YAML body"): an `applyFile`/`deleteFile` artifact and an `include`d manifest are substituted
//! by the executor inside their parsed string values, with `spec.vars` and earlier steps'
//! outputs; a value cannot inject YAML structure or be evaluated again; `$${` is a literal `${`
//! and any other non-name `${...}` fails the step naming the body and field.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::Client;
use serde_json::{json, Value};

use crate::common::{apply, create_flow, setup, step, wait_done};

/// Flow rights on ConfigMaps in its namespace.
fn cm_rule() -> Value {
    json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]})
}

async fn cm(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

fn data(cm: &ConfigMap, key: &str) -> String {
    cm.data.as_ref().unwrap()[key].clone()
}

/// The artifact ConfigMap `arts` holding `files`.
async fn artifacts(client: &Client, ns: &str, files: Value) {
    apply(client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "arts", "namespace": ns}, "data": files})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_file_substitutes_vars_and_step_outputs_inside_the_artifact() {
    let (client, ns, ctl) = setup("body-apply", json!([cm_rule()]), json!([])).await;
    artifacts(&client, &ns, json!({"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-${who}\n  namespace: ${ns}\ndata:\n  replicas: ${replicas}\n  greeting: hello ${who}\n  computed: n=${count}\n"})).await;
    create_flow(
        &client,
        &ns,
        "apply",
        json!({
            "serviceAccountName": "flow",
            "artifacts": [{"configMap": "arts"}],
            "vars": {"who": "team-a", "ns": ns, "replicas": "3"},
            "steps": [
                {"type": "eval", "expression": "1 + 2", "var": "count"},
                {"type": "applyFile", "path": "app.yaml"},
            ]
        }),
    )
    .await;
    let st = wait_done(&client, &ns, "apply", 90).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let made = cm(&client, &ns, "app-team-a")
        .await
        .expect("the object's name was substituted");
    assert_eq!(data(&made, "replicas"), "3");
    assert_eq!(data(&made, "greeting"), "hello team-a");
    assert_eq!(data(&made, "computed"), "n=3", "an earlier step's output");
    assert!(
        step(&st, "spec.steps[1]")["message"]
            .as_str()
            .unwrap()
            .contains(&format!("ConfigMap/{ns}/app-team-a")),
        "{st:#}"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_file_substitutes_the_names_it_deletes() {
    let (client, ns, ctl) = setup("body-delete", json!([cm_rule()]), json!([])).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "doomed-team-a", "namespace": ns}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept", "namespace": ns}})).await;
    artifacts(&client, &ns, json!({"doomed.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: doomed-${who}\n  namespace: ${ns}\n"})).await;
    create_flow(
        &client,
        &ns,
        "delete",
        json!({
            "serviceAccountName": "flow",
            "artifacts": [{"configMap": "arts"}],
            "vars": {"who": "team-a", "ns": ns},
            "steps": [{"type": "deleteFile", "path": "doomed.yaml"}]
        }),
    )
    .await;
    let st = wait_done(&client, &ns, "delete", 90).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let s = step(&st, "spec.steps[0]");
    assert_eq!(s["changed"], true, "{s:#}");
    assert!(
        cm(&client, &ns, "doomed-team-a").await.is_none(),
        "the substituted name was deleted: {s:#}"
    );
    assert!(cm(&client, &ns, "kept").await.is_some());
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn included_manifests_are_substituted_inside_their_values() {
    let (client, ns, ctl) = setup("body-include", json!([cm_rule()]), json!([])).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "docs", "namespace": ns}, "data": {
        "cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: included-${who}\n  namespace: ${ns}\ndata:\n  owner: ${who}\n",
    }})).await;
    create_flow(&client, &ns, "inc", json!({
        "serviceAccountName": "flow",
        "vars": {"who": "team-b", "ns": ns},
        "steps": [{"type": "include", "source": {"configMapRef": {"name": "docs", "key": "cm.yaml"}}, "as": "manifests"}]
    }))
    .await;
    let st = wait_done(&client, &ns, "inc", 90).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let made = cm(&client, &ns, "included-team-b")
        .await
        .expect("the included manifest's name was substituted");
    assert_eq!(data(&made, "owner"), "team-b");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_cannot_inject_yaml_into_a_body_nor_be_evaluated_again() {
    let (client, ns, ctl) = setup("body-inject", json!([cm_rule()]), json!([])).await;
    let evil = format!(
        "x\n  kind: Secret\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: injected\n  namespace: {ns}\n"
    );
    artifacts(&client, &ns, json!({"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: target\ndata:\n  a: ${evil}\n  b: before ${other} after\n"})).await;
    create_flow(
        &client,
        &ns,
        "inject",
        json!({
            "serviceAccountName": "flow",
            "artifacts": [{"configMap": "arts"}],
            "vars": {"evil": evil, "other": "${evil}", "who": "w"},
            "steps": [{"type": "applyFile", "path": "app.yaml"}]
        }),
    )
    .await;
    let st = wait_done(&client, &ns, "inject", 90).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let target = cm(&client, &ns, "target").await.expect("target applied");
    assert_eq!(data(&target, "a"), evil, "the value landed as one string");
    assert_eq!(
        data(&target, "b"),
        "before ${evil} after",
        "an inserted value is not scanned again"
    );
    assert!(
        cm(&client, &ns, "injected").await.is_none(),
        "no object from inside a value"
    );
    assert_eq!(
        target.metadata.name.as_deref(),
        Some("target"),
        "still the ConfigMap the file names"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_dollar_is_a_literal_and_other_shell_syntax_fails_naming_the_field() {
    let (client, ns, ctl) = setup("body-escape", json!([cm_rule()]), json!([])).await;
    artifacts(&client, &ns, json!({
        "ok.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: script\ndata:\n  run.sh: echo $${HOME:-/root} ${HOME} ${who}\n",
        "bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: never\ndata:\n  run.sh: echo ${HOME:-/root}\n",
    }))
    .await;
    create_flow(
        &client,
        &ns,
        "esc",
        json!({
            "serviceAccountName": "flow",
            "artifacts": [{"configMap": "arts"}],
            "vars": {"who": "w"},
            "steps": [
                {"type": "applyFile", "path": "ok.yaml"},
                {"type": "applyFile", "path": "bad.yaml"},
            ]
        }),
    )
    .await;
    let st = wait_done(&client, &ns, "esc", 90).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    let script = cm(&client, &ns, "script").await.expect("ok.yaml applied");
    assert_eq!(
        data(&script, "run.sh"),
        "echo ${HOME:-/root} ${HOME} w",
        "$${{ is a literal ${{, an unknown plain name stays"
    );
    let bad = step(&st, "spec.steps[1]");
    assert_eq!(bad["phase"], "Failed", "{bad:#}");
    let msg = bad["message"].as_str().unwrap();
    assert!(
        msg.contains("bad.yaml[0].data.run.sh") && msg.contains("HOME:-/root"),
        "{msg}"
    );
    assert!(cm(&client, &ns, "never").await.is_none());
    ctl.abort();
}
