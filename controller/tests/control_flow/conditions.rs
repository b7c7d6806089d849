//! The `if`/`when` comparisons `contains`, `greaterThan` (quantities) and `lessThan`, end to
//! end on testenv (the walker's unit tests cover them on a pure plan).

use serde_json::{json, Value};

use crate::common::{create_flow, setup, step, wait_done};

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
    crate::common::apply(
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
