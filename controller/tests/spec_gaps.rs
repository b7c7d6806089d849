//! Parts of the spec that had only unit tests, end to end on a real control plane (testenv):
//! the `if`/`when` comparisons `contains`, `greaterThan` (quantities) and `lessThan`; an
//! API-context `script` (bash in the step's pod); `includeFlow` of a flow in another namespace;
//! and a schedule's `timeZone`, as `status.nextScheduleTime` shows it.

use serde_json::{json, Value};

mod common;

use common::{create_flow, prepare, setup, start_controller, step, wait_done, wait_status};

fn cm_rules() -> Value {
    json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}])
}

/// A condition on ConfigMap `facts`'s `data.<key>`.
fn fact(ns: &str, key: &str, op: &str, value: &str) -> Value {
    json!({"resource": {"kind": "ConfigMap", "name": "facts", "namespace": ns},
           "jsonPath": format!("{{.data.{key}}}"), "op": op, "value": value})
}

/// A controller-local step that says `text`, so the branch taken shows in status.
fn say(text: &str) -> Value {
    json!({"type": "log", "message": text})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_and_when_compare_with_contains_greater_than_and_less_than() {
    let (client, ns, ctl) = setup("ops", cm_rules(), json!([])).await;
    common::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "facts", "namespace": ns},
        "data": {"motd": "maintenance window tonight", "disk": "12Gi", "replicas": "2"}}),
    )
    .await;
    let branch = |condition: Value| json!({"type": "if", "condition": condition, "then": [say("then")], "else": [say("else")]});
    create_flow(
        &client,
        &ns,
        "compare",
        json!({"serviceAccountName": "flow", "steps": [
            branch(fact(&ns, "motd", "contains", "window")),     // s0: then
            branch(fact(&ns, "motd", "contains", "outage")),     // s1: else
            branch(fact(&ns, "disk", "greaterThan", "10Gi")),    // s2: then (quantities)
            branch(fact(&ns, "disk", "greaterThan", "12Gi")),    // s3: else (equal is not greater)
            branch(fact(&ns, "replicas", "lessThan", "3")),      // s4: then
            branch(fact(&ns, "replicas", "lessThan", "1")),      // s5: else
            {"type": "when", "condition": fact(&ns, "missing", "greaterThan", "0")},
            say("guarded"),                                       // s7: skipped (a missing field)
            say("after")
        ]}),
    )
    .await;
    let st = wait_done(&client, &ns, "compare", 90).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let took = |i: usize| -> &str {
        let ran = |b: &str| step(&st, &format!("spec.steps[{i}].{b}[0]"))["phase"] == "Succeeded";
        match (ran("then"), ran("else")) {
            (true, false) => "then",
            (false, true) => "else",
            _ => "both or neither",
        }
    };
    let taken: Vec<&str> = (0..6).map(took).collect();
    assert_eq!(
        taken,
        ["then", "else", "then", "else", "then", "else"],
        "{st:#}"
    );
    assert_eq!(step(&st, "spec.steps[7]")["phase"], "Skipped", "{st:#}");
    assert_eq!(step(&st, "spec.steps[8]")["phase"], "Succeeded", "{st:#}");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_script_runs_with_bash_strict_flags_in_the_steps_pod() {
    let (client, ns, ctl) = setup("script", cm_rules(), json!([])).await;
    create_flow(&client, &ns, "scripted", json!({"serviceAccountName": "flow", "steps": [
        // bash arrays and [[ ]] (not in sh); its stdout becomes the variable.
        // (`$${` is a literal `${`.)
        {"type": "script", "var": "joined", "code": "parts=(a b c)\n[[ $${#parts[@]} -eq 3 ]]\nIFS=-; echo \"$${parts[*]}\""},
        {"type": "exec", "cmd": "kubectl create configmap got-${ joined | shq }"},
        // -e -o pipefail: a failing command inside a pipeline fails the step.
        {"type": "script", "code": "false | cat\necho not reached"}
    ]}))
    .await;
    let st = wait_done(&client, &ns, "scripted", 90).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert_eq!(step(&st, "spec.steps[0]")["phase"], "Succeeded", "{st:#}");
    assert!(
        common::harness::config_map(&client, &ns, "got-a-b-c")
            .await
            .is_some(),
        "{st:#}"
    );
    let failed = step(&st, "spec.steps[2]");
    assert_eq!(failed["phase"], "Failed", "{st:#}");
    assert!(!failed.to_string().contains("not reached"), "{st:#}");
    ctl.abort();
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
        common::harness::config_map(&client, &ns, "from-the-library")
            .await
            .is_none()
    );
    // Granted `get` on pseudoflows in the library's namespace: it runs, here, as the caller.
    common::apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-flows", "namespace": lib_ns},
        "rules": [{"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["get"]}]}))
    .await;
    common::apply(
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
        common::harness::config_map(&client, &ns, "from-the-library")
            .await
            .is_some(),
        "the library's object lands in the caller's namespace: {st:#}"
    );
    let lib = common::flows(&client, &lib_ns)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_is_read_in_its_time_zone() {
    let (client, ns, ctl) = setup("tz", json!([]), json!([])).await;
    // 03:00 in Kolkata (UTC+05:30) is 21:30 UTC; 03:00 in UTC is 03:00.
    for (name, zone, utc) in [
        ("kolkata", Some("Asia/Kolkata"), "21:30:00Z"),
        ("utc", None, "03:00:00Z"),
    ] {
        let mut spec = json!({"schedule": "0 3 * * *", "steps": [say("nightly")]});
        if let Some(z) = zone {
            spec["timeZone"] = json!(z);
        }
        create_flow(&client, &ns, name, spec).await;
        let st = wait_status(&client, &ns, name, 30, "a next slot", |s| {
            s["nextScheduleTime"].is_string()
        })
        .await;
        let next = st["nextScheduleTime"].as_str().unwrap();
        assert!(next.ends_with(utc), "{name}: {next}");
    }
    ctl.abort();
}
