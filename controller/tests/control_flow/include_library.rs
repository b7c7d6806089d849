//! `includeFlow` of a flow in another namespace, end to end on testenv: it runs with the
//! caller's rights, in the caller's namespace.

use serde_json::{json, Value};

use crate::common::{create_flow, prepare, start_controller, wait_done};

fn cm_rules() -> Value {
    json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_flow_reads_a_library_in_another_namespace_with_the_callers_rights() {
    // The library's namespace: its flow exists there; the caller's ServiceAccount may read it.
    let (client, lib_ns) = prepare("lib-home", json!([]), json!([])).await;
    let (_, ns) = prepare("lib-user", cm_rules(), json!([])).await;
    create_flow(
        &client,
        &lib_ns,
        "shared",
        json!({"includeOnly": true, "steps": [
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "from-the-library"}}}
        ]}),
    )
    .await;
    let ctl_lib = start_controller(&client, &lib_ns);
    let ctl = start_controller(&client, &ns);
    let include = json!({"serviceAccountName": "flow", "steps": [
        {"type": "includeFlow", "name": "shared", "namespace": lib_ns}
    ]});
    // Without a right to read flows there: the step fails naming it, nothing is applied.
    create_flow(&client, &ns, "denied", include.clone()).await;
    let st = wait_done(&client, &ns, "denied", 90).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert!(
        st["message"].as_str().unwrap().contains("forbidden"),
        "{st:#}"
    );
    assert!(
        crate::common::harness::config_map(&client, &ns, "from-the-library")
            .await
            .is_none()
    );
    // Granted `get` on pseudoflows in the library's namespace: it runs, here, as the caller.
    crate::common::apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-flows", "namespace": lib_ns},
        "rules": [{"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["get"]}]}))
    .await;
    crate::common::apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "read-flows", "namespace": lib_ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-flows"},
        "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]}),
    )
    .await;
    create_flow(&client, &ns, "allowed", include).await;
    let st = wait_done(&client, &ns, "allowed", 90).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert!(
        crate::common::harness::config_map(&client, &ns, "from-the-library")
            .await
            .is_some(),
        "the library's object lands in the caller's namespace: {st:#}"
    );
    let lib = crate::common::flows(&client, &lib_ns)
        .get("shared")
        .await
        .unwrap()
        .data["status"]
        .clone();
    assert!(
        lib["run"].is_null(),
        "the library never ran on its own: {lib:#}"
    );
    ctl.abort();
    ctl_lib.abort();
}
