//! An Event for every step, not only for steps that run in a Job (seed §5): every one of the
//! step types, each in a flow that runs it (sleep, eval, template to a variable, a structural
//! step's start and end, a branch left out, a failure before any Job exists; API steps, node
//! steps in a `loopNodes`, node maintenance, an approval that times out and the `onError` that
//! handles it), and steps aborted by the flow's timeout. A unit test checks that the two flows
//! together use every type the registry knows.

use std::collections::BTreeSet;

use serde_json::json;

use crate::common::{apply, create_flow, flow_events, setup, wait_done};

/// Every (reason, the step path leading its message) the flow's Events say, with the messages.
async fn told(
    client: &kube::Client,
    ns: &str,
    flow: &str,
) -> (BTreeSet<(String, String)>, Vec<String>) {
    let mut pairs = BTreeSet::new();
    let mut all = Vec::new();
    for e in flow_events(client, ns, flow).await {
        let reason = e.reason.unwrap_or_default();
        let note = e.message.unwrap_or_default();
        let at = note.split(':').next().unwrap_or_default().to_string();
        all.push(format!("{reason}: {note}"));
        pairs.insert((reason, at));
    }
    (pairs, all)
}

fn has(pairs: &BTreeSet<(String, String)>, reason: &str, at: &str) -> bool {
    pairs.contains(&(reason.to_string(), at.to_string()))
}

/// The step types the first flow uses (`told`): steps the controller runs itself (sleep, eval,
/// template, log), structural ones (loop, if) and an apply that fails before its Job exists.
const TOLD_TYPES: [&str; 7] = ["sleep", "eval", "template", "loop", "if", "log", "apply"];

/// The step types the second flow uses (`told-rest`), each with the path of one of its steps
/// and the reason its Event gives.
const REST: [(&str, &str, &str); 24] = [
    ("waitFor", "StepSucceeded", "spec.steps[1]"),
    ("copy", "StepSucceeded", "spec.steps[2]"),
    ("setLabel", "StepSucceeded", "spec.steps[3]"),
    ("removeLabel", "StepSucceeded", "spec.steps[4]"),
    ("patchLabel", "StepSucceeded", "spec.steps[6]"),
    ("delete", "StepSucceeded", "spec.steps[7]"),
    ("applyFile", "StepSucceeded", "spec.steps[8]"),
    ("deleteFile", "StepSucceeded", "spec.steps[9]"),
    ("include", "StepSucceeded", "spec.steps[10]"),
    ("when", "StepSucceeded", "spec.steps[11]"),
    ("exec", "StepSucceeded", "spec.steps[12]"),
    ("script", "StepSucceeded", "spec.steps[13]"),
    ("parallel", "StepSucceeded", "spec.steps[14]"),
    ("retry", "StepSucceeded", "spec.steps[15]"),
    ("includeFlow", "StepSucceeded", "spec.steps[16]"),
    ("loopNodes", "StepSucceeded", "spec.steps[17]"),
    ("configFile", "StepSucceeded", "spec.steps[17].steps[0]"),
    ("patchFile", "StepSucceeded", "spec.steps[17].steps[1]"),
    ("execNode", "StepSucceeded", "spec.steps[17].steps[2]"),
    ("cordon", "StepSucceeded", "spec.steps[18]"),
    ("uncordon", "StepSucceeded", "spec.steps[19]"),
    ("drain", "StepSucceeded", "spec.steps[20]"),
    // No webhook signs an approval here: it waits until its timeout fails it, and the onError
    // after it handles that. An onError has no start or end Event of its own (it is not a
    // step of the DAG but the handler of the step before it): it is told by the Events of the
    // steps it runs, at their paths under it.
    ("approval", "StepFailed", "spec.steps[22]"),
    ("onError", "StepSucceeded", "spec.steps[23].steps[0]"),
];

#[test]
fn the_two_flows_use_every_step_type() {
    let mut used: BTreeSet<&str> = TOLD_TYPES.into_iter().collect();
    used.extend(REST.iter().map(|(ty, _, _)| *ty));
    let all: BTreeSet<&str> = pseudoflow_crd::steps::registry::STEP_TYPES
        .iter()
        .copied()
        .collect();
    assert_eq!(used, all, "types not told: {:?}", all.difference(&used));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_steps_branches_and_a_failure_before_any_job_are_told_by_an_event_naming_their_path(
) {
    let (client, ns, ctl) = setup(
        "stepevents",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}]),
        json!([]),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "told",
        json!({
            "serviceAccountName": "flow",
            "vars": {"who": "ops"},
            "steps": [
                {"type": "sleep", "seconds": 1},
                {"type": "eval", "expression": "${who} ~ '-team'", "var": "team"},
                {"type": "template", "template": "hello {{ team }}", "output": "greeting"},
                {"type": "loop", "forEach": ["a", "b"], "steps": [{"type": "sleep", "seconds": 1}]},
                {"type": "if",
                 "condition": {"resource": {"kind": "ConfigMap", "name": "kube-root-ca.crt"},
                               "jsonPath": "{.metadata.name}", "op": "equals", "value": "other"},
                 "then": [{"type": "log", "message": "never"}],
                 "else": [{"type": "eval", "expression": "'else'", "var": "branch"}]},
                {"type": "apply", "continueOnError": true,
                 "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {v: '${team.no_such_field}'}\n"},
                {"type": "log", "message": "${greeting}"}
            ]
        }),
    )
    .await;
    let status = wait_done(&client, &ns, "told", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let (pairs, all) = told(&client, &ns, "told").await;
    // Every type of TOLD_TYPES is among these.
    let expected = [
        // A sleep is a timer of the controller: started in one reconcile, ended in a later one.
        ("StepStarted", "spec.steps[0]"),
        ("StepSucceeded", "spec.steps[0]"),
        ("StepSucceeded", "spec.steps[1]"),
        ("StepSucceeded", "spec.steps[2]"),
        // A structural step: its start and its end, and each of its instances.
        ("StepStarted", "spec.steps[3]"),
        ("StepSucceeded", "spec.steps[3]"),
        ("StepSucceeded", "spec.steps[3]"),
        ("StepSucceeded", "spec.steps[3].steps[0] [0]"),
        ("StepSucceeded", "spec.steps[3].steps[0] [1]"),
        // The condition ran in a Job; the branch not taken is skipped, the other ran.
        ("StepSucceeded", "spec.steps[4]"),
        ("StepSkipped", "spec.steps[4].then[0]"),
        ("StepSucceeded", "spec.steps[4].else[0]"),
        // Failed before any Job existed (an expression in its manifest fails), told at the
        // field that failed.
        ("StepFailed", "spec.steps[5].manifests[0].data.v"),
        ("Log", "hello ops-team"),
    ];
    let missing: Vec<_> = expected
        .iter()
        .filter(|(reason, at)| !has(&pairs, reason, at))
        .collect();
    assert!(
        missing.is_empty(),
        "no Event for {missing:?}; Events:\n{}",
        all.join("\n")
    );
    let failed = all
        .iter()
        .find(|e| e.starts_with("StepFailed: spec.steps[5]"))
        .unwrap();
    assert!(failed.contains("no_such_field"), "says why: {failed}");
    assert!(
        all.iter()
            .any(|e| e == "StepStarted: spec.steps[3]: started (loop: 2 items)"),
        "the loop's start says what it found: {all:#?}"
    );
    assert!(
        all.iter()
            .any(|e| e == "StepSucceeded: spec.steps[3]: loop ended"),
        "and its end: {all:#?}"
    );
    assert!(
        !all.iter()
            .any(|e| e.starts_with("StepStarted: spec.steps[5]")),
        "no Job was started for the step that failed before one existed: {all:#?}"
    );
    // Told once each: the end of a step is not repeated by a later reconcile.
    let ends = all
        .iter()
        .filter(|e| e.starts_with("StepSucceeded: spec.steps[1]:"))
        .count();
    assert_eq!(ends, 1, "{all:#?}");
    ctl.abort();
}

/// The objects `told-rest` works on: a manifest and steps in its artifacts ConfigMap, and a
/// flow for `includeFlow` to include.
async fn rest_fixtures(client: &kube::Client, ns: &str) {
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "artifacts", "namespace": ns},
            "data": {
                "cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-file}\ndata: {v: '1'}\n",
                "steps.yaml": "- type: log\n  message: included\n",
            }}),
    )
    .await;
    create_flow(
        client,
        ns,
        "other",
        json!({"steps": [{"type": "log", "message": "from the other flow"}]}),
    )
    .await;
}

/// The second flow: one step of every type the first does not use (`REST`, by index).
fn rest_steps() -> serde_json::Value {
    let node_file = "/etc/pseudoflow/told";
    json!([
        {"type": "apply", "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: src}\ndata: {k: v}\n"},
        {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "src"}, "condition": "Exist", "timeoutSeconds": 30},
        {"type": "copy", "from": {"kind": "ConfigMap", "name": "src"}, "to": [{"namespace": "${ns}", "name": "dst"}]},
        {"type": "setLabel", "target": {"kind": "ConfigMap", "name": "dst"}, "labels": {"a": "b"}},
        {"type": "removeLabel", "target": {"kind": "ConfigMap", "name": "dst"}, "keys": ["a"]},
        {"type": "eval", "expression": "{'dst': {'c': 'd'}}", "var": "by_name"},
        {"type": "patchLabel", "target": {"kind": "ConfigMap", "selector": ""}, "fromVar": "by_name"},
        {"type": "delete", "target": {"kind": "ConfigMap", "name": "dst"}},
        {"type": "applyFile", "path": "cm.yaml"},
        {"type": "deleteFile", "path": "cm.yaml"},
        {"type": "include", "source": {"configMapRef": {"name": "artifacts", "key": "steps.yaml"}}, "as": "steps"},
        {"type": "when", "condition": {"resource": {"kind": "ConfigMap", "name": "src"},
            "jsonPath": "{.data.k}", "op": "equals", "value": "v"}},
        {"type": "exec", "cmd": "echo hi", "var": "hi"},
        {"type": "script", "code": "echo there", "var": "there"},
        {"type": "parallel", "steps": [[{"type": "log", "message": "a"}], [{"type": "log", "message": "b"}]]},
        {"type": "retry", "attempts": 2, "steps": [{"type": "log", "message": "r"}]},
        {"type": "includeFlow", "name": "other"},
        {"type": "loopNodes", "selector": "kubernetes.io/hostname=worker-0", "steps": [
            {"type": "configFile", "path": node_file, "content": "told\n"},
            {"type": "patchFile", "path": node_file, "pattern": "told", "replace": "told twice"},
            {"type": "execNode", "cmd": "true"}
        ]},
        // The control-plane node: tainted, so no test's pod runs there to be evicted.
        {"type": "cordon", "node": "cp-0"},
        {"type": "uncordon", "node": "cp-0"},
        {"type": "drain", "node": "cp-0", "timeoutSeconds": 60},
        {"type": "uncordon", "node": "cp-0"},
        {"type": "approval", "name": "gate", "timeoutSeconds": 1},
        {"type": "onError", "steps": [{"type": "eval", "expression": "'handled'", "var": "handled"}]},
        {"type": "log", "message": "done"}
    ])
}

/// What `told-rest`'s ServiceAccount needs: ConfigMaps and the included flow here; nodes and
/// evictions for the node maintenance steps.
fn rest_rights() -> (serde_json::Value, serde_json::Value) {
    let here = json!([
        {"apiGroups": [""], "resources": ["configmaps"],
         "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["get"]},
    ]);
    let cluster = json!([
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ]);
    (here, cluster)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_other_step_type_is_told_by_an_event_naming_its_path() {
    let (here, cluster) = rest_rights();
    let (client, ns) = crate::common::prepare("stepevents-rest", here, cluster).await;
    let ctl = crate::common::start_node_controller(&client, &ns).await;
    rest_fixtures(&client, &ns).await;
    let steps = rest_steps().to_string().replace("${ns}", &ns);
    create_flow(
        &client,
        &ns,
        "told-rest",
        json!({"serviceAccountName": "flow", "artifacts": [{"configMap": "artifacts"}],
            "steps": serde_json::from_str::<serde_json::Value>(&steps).unwrap()}),
    )
    .await;
    let status = wait_done(&client, &ns, "told-rest", 240).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let (pairs, all) = told(&client, &ns, "told-rest").await;
    // A step told at its path, or (for an instance of a loop) at its path and instance.
    let told_at = |reason: &str, path: &str| {
        pairs
            .iter()
            .any(|(r, at)| r == reason && (at == path || at.starts_with(&format!("{path} ["))))
    };
    let missing: Vec<_> = REST
        .iter()
        .filter(|(_, reason, path)| !told_at(reason, path))
        .collect();
    assert!(
        missing.is_empty(),
        "no Event for {missing:?}; Events:\n{}",
        all.join("\n")
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_stopped_by_the_flow_timeout_are_told_aborted() {
    let (client, ns, ctl) = setup("abortevents", json!([]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "slow",
        json!({
            "options": {"timeoutSeconds": 2},
            "steps": [
                {"type": "parallel", "steps": [
                    [{"type": "sleep", "seconds": 60}],
                    [{"type": "sleep", "seconds": 60}]
                ]}
            ]
        }),
    )
    .await;
    let status = wait_done(&client, &ns, "slow", 60).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(status["reason"], "Timeout", "{status:#}");
    let (pairs, all) = told(&client, &ns, "slow").await;
    let aborted: Vec<_> = pairs
        .iter()
        .filter(|(reason, _)| reason == "StepAborted" || reason == "StepFailed")
        .map(|(_, at)| at.clone())
        .collect();
    assert!(
        aborted
            .iter()
            .any(|at| at.starts_with("spec.steps[0].steps[")),
        "the running sleeps are told stopped; Events:\n{}",
        all.join("\n")
    );
    ctl.abort();
}

/// The controller's Event publisher against the real API: three identical Events are one object
/// whose series counts 3 (what kube's Recorder did, without keeping whole Events in memory); an
/// Event with another action is an object of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_is_one_object_with_a_counted_series_and_another_is_its_own() {
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::api::{Api, ListParams};
    use pseudoflow_controller::flow::events::{EventPublisher, EventType, NewEvent};

    let (client, ns) = crate::common::prepare("ev-series", json!([]), json!([])).await;
    let publisher = EventPublisher::new(client.clone(), "pseudoflow-controller", None);
    let about = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some("thing".into()),
        namespace: Some(ns.clone()),
        uid: Some("00000000-0000-0000-0000-00000000e7e7".into()),
        ..Default::default()
    };
    let same = NewEvent {
        type_: EventType::Normal,
        reason: "Tested",
        action: "Tested-1",
        note: "first",
    };
    for _ in 0..3 {
        publisher.publish(&same, &about).await.unwrap();
    }
    let other = NewEvent {
        action: "Tested-2",
        note: "second",
        ..same.clone()
    };
    publisher.publish(&other, &about).await.unwrap();

    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, &ns);
    let events = api.list(&ListParams::default()).await.unwrap().items;
    let with = |note: &str| {
        let found: Vec<_> = events
            .iter()
            .filter(|e| e.note.as_deref() == Some(note))
            .collect();
        assert_eq!(found.len(), 1, "one object for {note:?}: {events:#?}");
        found[0].clone()
    };
    let first = with("first");
    assert_eq!(
        first.series.as_ref().map(|s| s.count),
        Some(3),
        "{first:#?}"
    );
    assert_eq!(
        first.reporting_controller.as_deref(),
        Some("pseudoflow-controller")
    );
    assert_eq!(
        first.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("thing")
    );
    assert!(with("second").series.is_none());
    assert_eq!(events.len(), 2, "{events:#?}");
}

/// `options.events` (docs/decisions.md#events-a-run-publishes): `Runs` keeps the run's outcome
/// and `log` messages but no per-step Normal Event; `Warnings` keeps only what went wrong. The
/// status still lists every step under both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_events_runs_and_warnings_leave_out_the_normal_events_they_name() {
    let (client, ns, ctl) = setup("eventpolicy", json!([]), json!([])).await;
    let steps = |last: serde_json::Value| {
        json!([
            {"type": "eval", "expression": "'a' ~ 'b'", "var": "ab"},
            {"type": "log", "message": "said ${ab}"},
            last
        ])
    };
    create_flow(
        &client,
        &ns,
        "runs",
        json!({"serviceAccountName": "flow", "options": {"events": "Runs"},
               "steps": steps(json!({"type": "sleep", "seconds": 1}))}),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "warnings",
        json!({"serviceAccountName": "flow", "options": {"events": "Warnings"},
               "steps": steps(json!({"type": "apply",
                   "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {v: '${ab.no_such_field}'}\n"}))}),
    )
    .await;
    let runs = wait_done(&client, &ns, "runs", 120).await;
    assert_eq!(runs["phase"], "Succeeded", "{runs:#}");
    assert_eq!(runs["steps"].as_array().map(Vec::len), Some(3), "{runs:#}");
    let (pairs, all) = told(&client, &ns, "runs").await;
    let reasons: BTreeSet<&str> = pairs.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["Log", "RunSucceeded"]),
        "Runs: the outcome and the log, no step's start or end: {all:#?}"
    );

    let warnings = wait_done(&client, &ns, "warnings", 120).await;
    assert_eq!(warnings["phase"], "Failed", "{warnings:#}");
    let (pairs, all) = told(&client, &ns, "warnings").await;
    let reasons: BTreeSet<&str> = pairs.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["RunFailed", "StepFailed"]),
        "Warnings: only the failure, told where it happened: {all:#?}"
    );
    assert!(
        has(&pairs, "StepFailed", "spec.steps[2].manifests[0].data.v"),
        "{all:#?}"
    );
    ctl.abort();
}
