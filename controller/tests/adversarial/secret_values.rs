//! Issue #31, item 4: a value a run reads from a Secret stays in Secrets. A user with `view` in
//! the flow's namespace (pods and their status, logs, ConfigMaps, Events, flows, the bound
//! kind's objects) must not find it: not in the step pods' termination messages (where results
//! and their variables used to travel), not in a spilled result ConfigMap, and not in the stderr
//! tail a failed command leaves in status, Events and a bound object's status. And a flow cannot
//! bind to Secrets, whose data the object view would copy into each child flow's spec.

use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::harness::{apply, create_flow, setup_with, wait_done};
use crate::common::{eventually, flows, step, TestKind};

const CANARY: &str = "pw-5c1e7a90b3d4";
/// The canary as a Secret's `data` holds it.
const CANARY_BASE64: &str = "cHctNWMxZTdhOTBiM2Q0";

/// What a leak of the canary looks like: its value, or its value as a Secret holds it.
const CANARY_FORMS: &[&str] = &[CANARY, CANARY_BASE64];

/// A Secret value of four letters, as short as a PIN (none of them hex digits, so no uid or
/// resourceVersion can hold it by chance).
const SHORT: &str = "qzxw";
/// [`SHORT`] as a Secret's `data` holds it.
const SHORT_BASE64: &str = "cXp4dw==";

/// Rights of the flow's ServiceAccount: read the Secret, write its ConfigMaps (a large result
/// spills into one).
fn rules() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]},
    ])
}

async fn plant_secret(client: &Client, ns: &str) {
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": ns},
               "stringData": {"pw": CANARY, "pin": SHORT}}),
    )
    .await;
}

/// The command that prints the Secret's value (kubectl in the step pod, as the flow).
const READ: &str = "kubectl get secret db -o jsonpath='{.data.pw}' | base64 -d";

/// `exec` reading the Secret's value into variable `var`.
fn read_secret(var: &str) -> Value {
    json!({"type": "exec", "var": var, "cmd": READ})
}

/// Everywhere `view` reaches in `ns` that holds one of `forms` of a Secret's value: pods (spec
/// and status), pod logs, ConfigMaps, Events, flows (spec and status) and `extra` (named
/// objects).
async fn leaks(client: &Client, ns: &str, forms: &[&str], extra: &[(&str, Value)]) -> Vec<String> {
    let holds_canary = |text: &str| forms.iter().any(|f| text.contains(f));
    let mut found = Vec::new();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for pod in pods.list(&ListParams::default()).await.unwrap().items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if holds_canary(&serde_json::to_string(&pod).unwrap()) {
            found.push(format!("pod {name} (spec or status)"));
        }
        let log = pods
            .logs(&name, &LogParams::default())
            .await
            .unwrap_or_default();
        if holds_canary(&log) {
            found.push(format!("log of pod {name}"));
        }
    }
    let cms = Api::<ConfigMap>::namespaced(client.clone(), ns);
    for cm in cms.list(&ListParams::default()).await.unwrap().items {
        if holds_canary(&serde_json::to_string(&cm).unwrap()) {
            found.push(format!(
                "ConfigMap {}",
                cm.metadata.name.unwrap_or_default()
            ));
        }
    }
    let events = Api::<Event>::namespaced(client.clone(), ns);
    for ev in events.list(&ListParams::default()).await.unwrap().items {
        if holds_canary(&serde_json::to_string(&ev).unwrap()) {
            found.push(format!("Event {}", ev.reason.unwrap_or_default()));
        }
    }
    for flow in flows(client, ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        if holds_canary(&serde_json::to_string(&flow.data).unwrap()) {
            found.push(format!("flow {}", flow.metadata.name.unwrap_or_default()));
        }
    }
    for (what, v) in extra {
        if holds_canary(&v.to_string()) {
            found.push(what.to_string());
        }
    }
    found
}

/// A variable read from a Secret by `exec` reaches the next step intact, and is in no pod's
/// termination message, no spilled result ConfigMap, no log, Event or status. Before the fix
/// every step's variables were in its pod's termination message (`kubectl get pod -o yaml`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variable_read_from_a_secret_is_in_no_pod_status_config_map_event_or_flow_status() {
    let (client, ns) = setup_with("secret-var", rules()).await;
    plant_secret(&client, &ns).await;
    let big = "printf '%s' \"$(kubectl get secret db -o jsonpath='{.data.pw}' | base64 -d)\"; head -c 6000 /dev/zero | tr '\\0' x";
    create_flow(
        &client,
        &ns,
        "reads-secret",
        json!({
            "serviceAccountName": "flow",
            "steps": [
                read_secret("pw"),
                // Past the termination message's 3.8 KB: the result spills into a ConfigMap.
                {"type": "exec", "var": "big", "cmd": big},
                // The variable reaches the next step intact (compared with the Secret again).
                {"type": "exec", "cmd": format!("test \"${{pw}}\" = \"$({READ})\"")},
            ],
        }),
    )
    .await;
    // One step alone: its small result goes to the termination message.
    let one = json!({"serviceAccountName": "flow", "steps": [read_secret("pw")]});
    create_flow(&client, &ns, "reads-once", one).await;
    let status = wait_done(&client, &ns, "reads-secret").await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let status = wait_done(&client, &ns, "reads-once").await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // The steps may run fused in one Job (docs/decisions.md#step-fusion): its journal too.
    assert!(!pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
    let found = leaks(&client, &ns, CANARY_FORMS, &[]).await;
    assert!(
        found.is_empty(),
        "the Secret's value leaked into: {found:?}"
    );
}

/// A failing command whose stderr repeats the value: status, the step's entry, Events and the
/// bound object's status (write-back) show the failure with the value redacted. Before the fix
/// the last 1,000 characters of stderr went there as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_repeating_a_secret_value_is_redacted_in_status_events_and_the_bound_object() {
    let kind = TestKind::new("secrets.adversarial.example.com", "Login");
    let mut rules = rules();
    rules.as_array_mut().unwrap().extend([
        json!({"apiGroups": ["secrets.adversarial.example.com"], "resources": ["logins"], "verbs": ["get", "list", "watch", "patch"]}),
        json!({"apiGroups": ["secrets.adversarial.example.com"], "resources": ["logins/status"], "verbs": ["patch"]}),
    ]);
    let (client, ns) = setup_with("secret-stderr", rules).await;
    let logins = kind.install(&client, &ns).await;
    plant_secret(&client, &ns).await;
    let fail = "echo \"login refused for password ${pw}\" >&2; exit 3";
    create_flow(
        &client,
        &ns,
        "logins",
        json!({
            "serviceAccountName": "flow",
            "bind": {"apiVersion": "secrets.adversarial.example.com/v1", "kind": "Login"},
            "steps": [read_secret("pw"), {"type": "exec", "cmd": fail}],
        }),
    )
    .await;
    apply(&client, kind.object(&ns, "one", json!({}))).await;
    let status = || async { logins.get("one").await.unwrap().data["status"].clone() };
    eventually(90, "the Login failed", || async {
        status().await["phase"] == "Failed"
    })
    .await;
    let object = status().await;
    let message = object["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains("login refused for password [redacted]"),
        "the failure is still explained: {object:#}"
    );
    let found = leaks(
        &client,
        &ns,
        CANARY_FORMS,
        &[("the Login's status", object)],
    )
    .await;
    assert!(
        found.is_empty(),
        "the Secret's value leaked into: {found:?}"
    );
}

/// A Secret's value as short as a PIN, repeated by a failing command, is cut out of the failure
/// where it stands as a word. Before, values under six characters were never redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_repeating_a_short_secret_value_is_redacted_where_it_stands_as_a_word() {
    let (client, ns) = setup_with("secret-short", rules()).await;
    plant_secret(&client, &ns).await;
    let read = "kubectl get secret db -o jsonpath='{.data.pin}' | base64 -d";
    let fail = "echo \"wrong pin ${pin} (pin=${pin})\" >&2; exit 3";
    create_flow(
        &client,
        &ns,
        "pin",
        json!({
            "serviceAccountName": "flow",
            "steps": [{"type": "exec", "var": "pin", "cmd": read}, {"type": "exec", "cmd": fail}],
        }),
    )
    .await;
    let status = wait_done(&client, &ns, "pin").await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("wrong pin [redacted] (pin=[redacted])"),
        "the failure is still explained: {status:#}"
    );
    let found = leaks(&client, &ns, &[SHORT, SHORT_BASE64], &[]).await;
    assert!(
        found.is_empty(),
        "the Secret's value leaked into: {found:?}"
    );
}

/// `spec.bind` on `v1/Secret` is refused naming the path: the object view (data included) would
/// be copied into every child flow's spec, which `view` reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_to_secrets_is_an_invalid_spec_naming_the_path_and_no_child_is_made() {
    // The ServiceAccount may watch Secrets: only the refusal keeps the data out of children.
    let (client, ns) = setup_with(
        "secret-bind",
        json!([
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]},
        ]),
    )
    .await;
    plant_secret(&client, &ns).await;
    let flow = json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "metadata": {"name": "secrets"}, "spec": {"serviceAccountName": "flow",
        "bind": {"apiVersion": "v1", "kind": "Secret", "record": "Child", "status": {"phaseField": "", "conditions": false}},
        "steps": [{"type": "log", "message": "${object.data}"}]}});
    flows(&client, &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(flow).unwrap(),
        )
        .await
        .unwrap();
    let api = flows(&client, &ns);
    let settled = || async {
        let all = api.list(&ListParams::default()).await.unwrap().items;
        let refused = all
            .iter()
            .any(|f| f.data["status"]["reason"] == "InvalidSpec");
        refused || all.len() > 1
    };
    eventually(60, "the flow refused or a child made", settled).await;
    let found = leaks(&client, &ns, CANARY_FORMS, &[]).await;
    assert!(
        found.is_empty(),
        "the Secret's value leaked into: {found:?}"
    );
    let status = api.get("secrets").await.unwrap().data["status"].clone();
    assert_eq!(status["reason"], "InvalidSpec", "{status:#}");
    assert!(
        status
            .to_string()
            .contains("spec.bind.kind: a flow cannot be bound to Secrets"),
        "{status:#}"
    );
    let all = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 1, "no child flow was made");
}

/// Issue #42, item 7: an `if` or `when` (in a pod, and in the controller for a flow with
/// `apiSteps: Controller`), a `waitFor: Custom` that times out, and a comparison that cannot be
/// made, each on a field of a Secret: status, Events and pod logs name the field, never its
/// value. Before the fix the condition's result said `{.data.pw} is "<base64>"`, the timeout
/// `last seen: ... is "<base64>"` and the comparison error quoted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_waits_and_comparisons_on_a_secret_name_the_field_not_its_value() {
    // `waitFor` watches the Secret.
    let mut rules = rules();
    rules[0]["verbs"] = json!(["get", "list", "watch"]);
    let (client, ns) = setup_with("secret-cond", rules).await;
    plant_secret(&client, &ns).await;
    let secret = |path: &str, op: &str, value: &str| json!({"resource": {"kind": "Secret", "name": "db"}, "jsonPath": path, "op": op, "value": value});
    let say = |text: &str| json!({"type": "log", "message": text});
    let steps = json!([
        {"type": "if", "condition": secret("{.data.pw}", "equals", "guess"),
         "then": [say("then")], "else": [say("else")]},
        {"type": "when", "condition": secret("{.data.pin}", "notEquals", "")},
        say("guarded"),
        {"type": "waitFor", "resource": {"kind": "Secret", "name": "db"}, "condition": "Custom",
         "jsonPath": "{.data.pw}", "op": "equals", "value": "never", "timeoutSeconds": 3,
         "continueOnError": true},
    ]);
    let in_pods = json!({"serviceAccountName": "flow", "steps": steps});
    let in_controller = json!({"serviceAccountName": "flow", "steps": steps,
        "options": {"apiSteps": "Controller"}});
    // Not numbers: an order comparison of the Secret's value fails the step.
    let compare = json!({"serviceAccountName": "flow", "steps": [
        {"type": "if", "condition": secret("{.data.pin}", "greaterThan", "1000"), "then": [say("then")]},
    ]});
    create_flow(&client, &ns, "in-pods", in_pods).await;
    create_flow(&client, &ns, "in-controller", in_controller).await;
    create_flow(&client, &ns, "compare", compare).await;
    let statuses = [
        wait_done(&client, &ns, "in-pods").await,
        wait_done(&client, &ns, "in-controller").await,
        wait_done(&client, &ns, "compare").await,
    ];
    let forms = [CANARY, CANARY_BASE64, SHORT, SHORT_BASE64];
    let found = leaks(&client, &ns, &forms, &[]).await;
    assert!(
        found.is_empty(),
        "the Secret's value leaked into: {found:?}"
    );
    for (name, status) in ["in-pods", "in-controller"].iter().zip(&statuses) {
        assert_eq!(status["phase"], "Succeeded", "{name}: {status:#}");
        let message = |path: &str| step(status, path)["message"].to_string();
        assert!(
            message("spec.steps[0]").contains("{.data.pw}"),
            "{name}: the condition names the field: {status:#}"
        );
        assert!(
            message("spec.steps[3]").contains("timed out")
                && message("spec.steps[3]").contains("{.data.pw}"),
            "{name}: the timeout names the field: {status:#}"
        );
    }
    let status = &statuses[2];
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert!(
        status.to_string().contains("{.data.pin}"),
        "the comparison error names the field: {status:#}"
    );
}

/// Issue #42, item 7: the bound object is the tenant's; what it holds must not spare a value
/// from redaction. The tenant pads the object with every guess of a four-letter PIN, one of
/// which is the PIN a failing command repeats: the failure still says `[redacted]`. Before the
/// fix redaction kept every value found in the run's spec, the object included, and the PIN
/// stood in the flow's and the object's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_padded_into_the_bound_object_do_not_spare_a_secret_value_from_redaction() {
    let kind = TestKind::new("padded.adversarial.example.com", "Login");
    let mut rules = rules();
    rules.as_array_mut().unwrap().extend([
        json!({"apiGroups": ["padded.adversarial.example.com"], "resources": ["logins"], "verbs": ["get", "list", "watch", "patch"]}),
        json!({"apiGroups": ["padded.adversarial.example.com"], "resources": ["logins/status"], "verbs": ["patch"]}),
    ]);
    let (client, ns) = setup_with("secret-padded", rules).await;
    let logins = kind.install(&client, &ns).await;
    plant_secret(&client, &ns).await;
    // Fails when the read does (a pipe into base64 would succeed with an empty PIN), and is
    // retried: a step pod may start before the API server's RBAC cache has its Role.
    let read =
        "p=$(kubectl get secret db -o jsonpath='{.data.pin}') && printf '%s' \"$p\" | base64 -d";
    let read = json!({"type": "retry", "attempts": 3, "backoffSeconds": 1,
        "steps": [{"type": "exec", "var": "pin", "cmd": read}]});
    let fail = "echo \"wrong pin ${pin}\" >&2; exit 3";
    create_flow(
        &client,
        &ns,
        "logins",
        json!({
            "serviceAccountName": "flow",
            "bind": {"apiVersion": "padded.adversarial.example.com/v1", "kind": "Login"},
            "steps": [read, {"type": "exec", "cmd": fail}],
        }),
    )
    .await;
    // Every guess `qzxa` .. `qzxz`, the PIN among them.
    let guesses: Vec<String> = (b'a'..=b'z').map(|c| format!("qzx{}", c as char)).collect();
    assert!(guesses.iter().any(|g| g == SHORT));
    apply(
        &client,
        kind.object(&ns, "one", json!({"guesses": guesses})),
    )
    .await;
    let status = || async { logins.get("one").await.unwrap().data["status"].clone() };
    eventually(90, "the Login failed", || async {
        status().await["phase"] == "Failed"
    })
    .await;
    let object = status().await;
    let message = object["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains("wrong pin [redacted]"),
        "the failure is redacted and still explained: {object:#}"
    );
    // The PIN itself stands in the object and its child flow's spec (the tenant put it
    // there); as the failure says it, it must be nowhere.
    let said = format!("pin {SHORT}");
    let found = leaks(
        &client,
        &ns,
        &[said.as_str()],
        &[("the Login's status", object)],
    )
    .await;
    assert!(
        found.is_empty(),
        "the Secret's value leaked into: {found:?}"
    );
}

/// Issue #42, item 7, in the controller: a flow recorded in its objects (`record: Object`)
/// evaluates `if` and `waitFor` itself, and writes what they saw into the object's status and
/// Events. A condition, a wait that times out and a comparison that cannot be made, on a
/// Secret's fields, name the field there and never the value. Before the fix the comparison's
/// failure quoted the value into the object's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_on_a_secret_run_by_the_controller_for_an_object_name_the_field_not_its_value() {
    let kind = TestKind::new("vaults.adversarial.example.com", "Vault");
    let mut rules = rules();
    rules[0]["verbs"] = json!(["get", "list", "watch"]);
    rules.as_array_mut().unwrap().extend([
        json!({"apiGroups": ["vaults.adversarial.example.com"], "resources": ["vaults"], "verbs": ["get", "list", "watch", "patch"]}),
        json!({"apiGroups": ["vaults.adversarial.example.com"], "resources": ["vaults/status"], "verbs": ["patch"]}),
    ]);
    let (client, ns) = setup_with("secret-inobj", rules).await;
    let vaults = kind.install(&client, &ns).await;
    plant_secret(&client, &ns).await;
    let secret = |path: &str, op: &str, value: &str| json!({"resource": {"kind": "Secret", "name": "db"}, "jsonPath": path, "op": op, "value": value});
    let say = |text: &str| json!({"type": "log", "message": text});
    create_flow(
        &client,
        &ns,
        "vaults",
        json!({
            "serviceAccountName": "flow",
            "bind": {"apiVersion": "vaults.adversarial.example.com/v1", "kind": "Vault",
                     "record": "Object"},
            "steps": [
                {"type": "if", "condition": secret("{.data.pw}", "equals", "guess"),
                 "then": [say("then")], "else": [say("else")]},
                {"type": "waitFor", "resource": {"kind": "Secret", "name": "db"},
                 "condition": "Custom", "jsonPath": "{.data.pw}", "op": "equals",
                 "value": "never", "timeoutSeconds": 2, "continueOnError": true},
                {"type": "if", "condition": secret("{.data.pin}", "greaterThan", "1000"),
                 "then": [say("then")]},
            ],
        }),
    )
    .await;
    apply(&client, kind.object(&ns, "one", json!({}))).await;
    let status = || async { vaults.get("one").await.unwrap().data["status"].clone() };
    eventually(90, "the Vault failed", || async {
        status().await["phase"] == "Failed"
    })
    .await;
    let object = status().await;
    let forms = [CANARY, CANARY_BASE64, SHORT, SHORT_BASE64];
    let found = leaks(
        &client,
        &ns,
        &forms,
        &[("the Vault's status", object.clone())],
    )
    .await;
    assert!(
        found.is_empty(),
        "the Secret's value leaked into: {found:?}"
    );
    assert!(
        object["message"]
            .as_str()
            .unwrap_or_default()
            .contains("{.data.pin} of the Secret"),
        "the failure names the field: {object:#}"
    );
}
