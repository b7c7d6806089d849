//! An Event for every step, not only for steps that run in a Job (seed §5): sleep,
//! eval, template to a variable, a structural step's start and end, a branch left out, a failure
//! before any Job exists, and steps aborted by the flow's timeout.

use std::collections::BTreeSet;

use serde_json::json;

mod common;

use common::{create_flow, flow_events, setup, wait_done};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_type_is_told_by_an_event_naming_its_path() {
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
    use pseudoflow_controller::reconcile::events::{EventPublisher, EventType, NewEvent};

    let (client, ns) = common::prepare("ev-series", json!([]), json!([])).await;
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
