//! Flows bound to a kind recorded in their objects (`spec.bind.record: Object`,
//! docs/bound-flows.md), on testenv, with the controller holding the chart's ClusterRole only:
//! each object's steps run in the controller and the result lands only in the object (its
//! status and its served mark) — no child flow, no run-state Secret; an update runs again with
//! `trigger.changed`; a failing step fails its object naming the step's path; a flow with a step
//! that needs a pod is refused naming that step; a forged served mark moves only its own object;
//! `onDelete` runs behind a finalizer on the object, retried until it succeeds, and a deleted
//! flow releases that finalizer. Related objects (`bind.related`) followed in the object are in
//! `in_object_related.rs`.

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use pseudoflow_controller::bind::served::mark_key;
use serde_json::{json, Value};

use crate::common::bound::*;
use crate::common::{create_flow, eventually, flows, wait_status, wait_until, Shown};

/// The widget flow of the bound-flow tests, recorded in the objects, without its `onDelete`
/// (so it puts no finalizer on its objects; [`on_delete_flow`] keeps it).
pub(crate) fn in_object_flow() -> Value {
    let mut flow = widget_flow(json!({"record": "Object"}));
    flow.as_object_mut().unwrap().remove("onDelete");
    flow
}

pub(crate) async fn config_map(client: &Client, ns: &str, name: &str) -> Option<Value> {
    let api = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns);
    let cm = api.get_opt(name).await.unwrap()?;
    Some(serde_json::to_value(cm.data.unwrap_or_default()).unwrap())
}

pub(crate) async fn delete_config_map(client: &Client, ns: &str, name: &str) {
    let api = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns);
    api.delete(name, &Default::default()).await.unwrap();
}

/// Widget `name`'s served mark of flow `widgets`.
pub(crate) async fn mark_of(client: &Client, ns: &str, name: &str) -> Option<String> {
    let w = widgets(client, ns).get(name).await.unwrap();
    let a = w.metadata.annotations.unwrap_or_default();
    a.get(&mark_key(ns, "widgets")).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_is_served_in_itself_with_no_child_flow_and_no_run_state() {
    let (client, ns, ctx) = setup_with_context("inobj-serve", all_verbs()).await;
    create_flow(&client, &ns, "widgets", in_object_flow()).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    let status = wait_widget(&client, &ns, "w", "Running").await;
    assert_eq!(status["made"], "w-made", "{status:#}");
    let made = config_map(&client, &ns, "w-made-one").await.expect("made");
    assert_eq!(made["event"], "create");
    assert!(config_map(&client, &ns, "w-created").await.is_some());
    eventually(30, "the served mark", || async {
        mark_of(&client, &ns, "w").await.is_some()
    })
    .await;
    // Only the bound flow itself; no Secret holds a run.
    let all = flows(&client, &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let names: Vec<_> = all
        .items
        .iter()
        .filter_map(|f| f.metadata.name.clone())
        .collect();
    assert_eq!(names, ["widgets"]);
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns);
    let secrets = secrets.list(&ListParams::default()).await.unwrap();
    assert!(
        secrets.items.iter().all(|s| !s
            .metadata
            .name
            .as_deref()
            .unwrap_or("")
            .starts_with("widgets")),
        "{:?}",
        secrets
            .items
            .iter()
            .map(|s| &s.metadata.name)
            .collect::<Vec<_>>()
    );
    let w = widgets(&client, &ns).get("w").await.unwrap();
    assert!(
        w.metadata.finalizers.unwrap_or_default().is_empty(),
        "no finalizer needed"
    );
    // An update runs again, told what changed.
    let patch = json!({"spec": {"version": "two"}});
    widgets(&client, &ns)
        .patch("w", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually(60, "the update served", || async {
        config_map(&client, &ns, "w-made-two").await.is_some()
    })
    .await;
    let made = config_map(&client, &ns, "w-made-two").await.unwrap();
    assert_eq!(made["event"], "update");
    wait_widget(&client, &ns, "w", "Running").await;
    // Each step's time is counted under the bound flow, as a child's would be.
    let text = ctx.shared.metrics.render();
    let count = format!(
        "pseudoflow_step_duration_seconds_count{{flow=\"{ns}/widgets\",step_type=\"apply\"}} "
    );
    let n: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&count))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {count} in {text}"));
    assert!(n >= 3, "made twice and created once: {n}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_step_fails_its_object_naming_the_step() {
    let (client, ns) = setup("inobj-fail", all_verbs()).await;
    create_flow(&client, &ns, "widgets", in_object_flow()).await;
    create_widget(&client, &ns, "good", json!({"version": "one"})).await;
    create_widget(&client, &ns, "bad", json!({"version": "NOT_A_NAME"})).await;
    let bad = wait_widget(&client, &ns, "bad", "Failed").await;
    let message = bad["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("spec.steps[0]"), "{bad:#}");
    wait_widget(&client, &ns, "good", "Running").await;
    // The bound flow sums up what its serves saw (there is no child to count).
    let status = wait_status(&client, &ns, "widgets", 60, "both objects summed up", |s| {
        s["bound"]["running"] == 1 && s["bound"]["failed"] == 1
    })
    .await;
    assert_eq!(status["bound"]["objects"], 2, "{status:#}");
    let failure = &status["bound"]["failures"][0];
    assert_eq!(failure["object"], format!("{ns}/bad"), "{status:#}");
    assert!(
        failure["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("spec.steps[0]"),
        "{status:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_with_a_step_in_a_pod_is_refused_naming_the_step() {
    let (client, ns) = setup("inobj-refused", all_verbs()).await;
    let mut flow = in_object_flow();
    flow["steps"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "exec", "cmd": "true"}));
    create_flow(&client, &ns, "widgets", flow).await;
    let status = wait_status(&client, &ns, "widgets", 60, "invalid", |s| {
        s["reason"] == "InvalidSpec"
    })
    .await;
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "spec.steps[2]: (exec): bind.record: Object needs every step to run in the \
             controller; this one runs in a pod"
        ),
        "{status:#}"
    );
}

/// A tenant who writes objects of the kind copies object B's served mark onto object A (same
/// content, same generation): A is served again as if new, and B is not touched. (The mark's
/// own write wakes no flow, as the flow's own echo would not; the label written with it does.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_forged_mark_moves_only_its_own_object() {
    let (client, ns) = setup("inobj-forge", all_verbs()).await;
    create_flow(&client, &ns, "widgets", in_object_flow()).await;
    for w in ["a", "b"] {
        create_widget(&client, &ns, w, json!({"version": "one"})).await;
    }
    for w in ["a", "b"] {
        wait_widget(&client, &ns, w, "Running").await;
        eventually(30, "the served mark", || async {
            mark_of(&client, &ns, w).await.is_some()
        })
        .await;
    }
    delete_config_map(&client, &ns, "a-created").await;
    delete_config_map(&client, &ns, "b-created").await;
    let b_mark = mark_of(&client, &ns, "b").await.unwrap();
    let forged = json!({"metadata": {"annotations": {mark_key(&ns, "widgets"): b_mark},
        "labels": {"touched": "yes"}}});
    widgets(&client, &ns)
        .patch("a", &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .unwrap();
    eventually(60, "a served again, as new", || async {
        config_map(&client, &ns, "a-created").await.is_some()
    })
    .await;
    let b_after = mark_of(&client, &ns, "b").await.unwrap();
    assert_eq!(b_after, b_mark, "b's mark untouched");
    assert!(
        config_map(&client, &ns, "b-created").await.is_none(),
        "b was not served again"
    );
    eventually(30, "a's own mark written again", || async {
        mark_of(&client, &ns, "a").await.as_ref() != Some(&b_mark)
    })
    .await;
}

/// A tenant creates an object nested 130 deep (past serde_json's limit): it is named in the
/// bound flow's failures and the other objects are served, as for a flow recorded in children.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_an_object_too_deep_to_decode_fails_alone() {
    let (client, ns) = setup("inobj-deep", all_verbs()).await;
    create_flow(&client, &ns, "widgets", in_object_flow()).await;
    let nested = format!("{}1{}", "{\"a\":".repeat(130), "}".repeat(130));
    let body = format!(
        r#"{{"apiVersion":"{GROUP}/v1","kind":"Widget","metadata":{{"name":"deep","namespace":"{ns}"}},"spec":{{"version":"one","deep":{nested}}}}}"#
    );
    let url = widgets(&client, &ns).resource_url().to_string();
    let request = kube::core::Request::new(url)
        .create(&kube::api::PostParams::default(), body.into_bytes())
        .unwrap();
    client.request_text(request).await.unwrap();
    create_widget(&client, &ns, "ok", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "ok", "Running").await;
    let status = wait_status(&client, &ns, "widgets", 60, "the deep one named", |s| {
        s["bound"]["failures"][0]["object"] == format!("{ns}/deep") && s["bound"]["running"] == 1
    })
    .await;
    let message = status["bound"]["failures"][0]["message"].as_str().unwrap();
    assert!(message.contains("nested deeper than"), "{message}");
}

/// A flow switched from `record: Child` to `record: Object` lets go of what it kept per object
/// (the child, released so no `onDelete` runs, and the finalizer) and serves the object in
/// itself; deleted, it goes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_from_child_to_object_releases_the_child_and_the_finalizer() {
    let (client, ns) = setup("inobj-switch", all_verbs()).await;
    let mut child_flow = in_object_flow();
    child_flow["bind"]["record"] = json!("Child");
    create_flow(&client, &ns, "widgets", child_flow).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    let child = pseudoflow_controller::bind::child::child_name("widgets", &ns, "w");
    assert!(flows(&client, &ns).get_opt(&child).await.unwrap().is_some());
    create_flow(&client, &ns, "widgets", in_object_flow()).await;
    let shown = [
        Shown::object(widgets(&client, &ns), &ns, "w"),
        Shown::flow(&client, &ns, "widgets"),
        Shown::flow(&client, &ns, &child),
    ];
    wait_until(&client, "the child gone", 60, &shown, || async {
        flows(&client, &ns).get_opt(&child).await.unwrap().is_none()
    })
    .await;
    let served = "served in the object (its mark), without our finalizer";
    wait_until(&client, served, 60, &shown, || async {
        let w = widgets(&client, &ns).get("w").await.unwrap();
        let fins = w.metadata.finalizers.unwrap_or_default();
        fins.is_empty() && mark_of(&client, &ns, "w").await.is_some()
    })
    .await;
    crate::delete_bound_flow(&client, &ns).await;
    assert!(widgets(&client, &ns).get_opt("w").await.unwrap().is_some());
}

/// A status write refused (here the flow's ServiceAccount lost `widgets/status` after the
/// watch started; under load, a timeout or a 429 does the same) is told as
/// `StatusWriteFailed` on the object, and the object is tried again within seconds (`RETRY_OBJECT`), not at
/// the next full pass five minutes later: nothing else wakes the bound flow for an object that
/// does not change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_whose_status_write_failed_is_served_again_soon() {
    let (client, ns) = setup("inobj-status", all_verbs()).await;
    create_flow(&client, &ns, "widgets", in_object_flow()).await;
    create_widget(&client, &ns, "first", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "first", "Running").await;
    let role = |rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "flow", "namespace": ns}, "rules": rules})
    };
    let mut without_status = flow_rules(all_verbs());
    without_status.as_array_mut().unwrap().remove(1);
    crate::common::apply(&client, role(without_status)).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    let shown = [
        Shown::object(widgets(&client, &ns), &ns, "w"),
        Shown::flow(&client, &ns, "widgets"),
    ];
    wait_until(
        &client,
        "StatusWriteFailed told on the object",
        60,
        &shown,
        || async {
            events_on(&client, &ns, "Widget", "w")
                .await
                .iter()
                .any(|(t, r, _, _)| t == "Warning" && r == "StatusWriteFailed")
        },
    )
    .await;
    assert!(
        mark_of(&client, &ns, "w").await.is_none(),
        "not marked served"
    );
    crate::common::apply(&client, role(flow_rules(all_verbs()))).await;
    wait_until(
        &client,
        "served again, its status written",
        30,
        &shown,
        || async {
            widget_status(&client, &ns, "w").await["phase"] == "Running"
                && mark_of(&client, &ns, "w").await.is_some()
        },
    )
    .await;
}

/// A suspended flow starts no run for an object (as a child's would hold); resumed, it serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_flow_serves_nothing_until_resumed() {
    let (client, ns) = setup("inobj-suspend", all_verbs()).await;
    let mut flow = in_object_flow();
    flow["suspend"] = json!(true);
    create_flow(&client, &ns, "widgets", flow.clone()).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert!(config_map(&client, &ns, "w-made-one").await.is_none());
    assert!(mark_of(&client, &ns, "w").await.is_none());
    flow["suspend"] = json!(false);
    create_flow(&client, &ns, "widgets", flow).await;
    wait_widget(&client, &ns, "w", "Running").await;
    assert!(config_map(&client, &ns, "w-made-one").await.is_some());
}

/// A tenant's object whose data makes a step fail under a long `retry` (here an invalid name:
/// four attempts, 15 s backoff doubling, about 105 s) must not hold the bound flow's reconcile,
/// nor with it every other tenant's object, for as long as the retries last: each object's run
/// goes on in a task of its own (as kopf runs each handler), so another tenant's object created
/// just after is served within seconds while the slow one is still retrying, neither cut short
/// nor failed (before: it held the reconcile, then was cut after 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_an_object_whose_retries_last_cannot_hold_the_others() {
    let (client, ns) = setup("inobj-hold", all_verbs()).await;
    let mut flow = in_object_flow();
    let made = flow["steps"][0].take();
    flow["steps"][0] =
        json!({"type": "retry", "attempts": 4, "backoffSeconds": 15, "steps": [made]});
    create_flow(&client, &ns, "widgets", flow).await;
    create_widget(&client, &ns, "slow", json!({"version": "NOT_A_NAME"})).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let asked = std::time::Instant::now();
    create_widget(&client, &ns, "other", json!({"version": "one"})).await;
    eventually(25, "the other tenant's object served", || async {
        widget_status(&client, &ns, "other").await["phase"] == "Running"
    })
    .await;
    eprintln!("served {:?} after it was made", asked.elapsed());
    let slow = widget_status(&client, &ns, "slow").await;
    assert_eq!(
        slow["phase"], "Creating",
        "the slow object is still in its retries, shown so: nothing failed it or cut it short"
    );
    eventually(
        20,
        "the flow counts the slow object as creating",
        || async {
            let bound = bound_summary(&client, &ns).await.clone();
            bound["creating"] == 1 && bound["running"] == 1
        },
    )
    .await;
}

/// A wait holds nothing but its object's task: 12 objects whose first step waits for their
/// credentials Secret (`waitFor: Exist`, 600 s, as seed 001's Database flow) are all parked at
/// once, well past the 10 s an object's run was once cut at, while an object whose Secret
/// exists is served beside them; each parked one is served when its Secret comes, woken by the
/// watch of what it waits for, not by a poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_hold_nothing_and_an_object_is_served_when_what_it_waits_for_comes() {
    let mut verbs = all_verbs();
    let (client, ns) = setup("inobj-park", verbs.take()).await;
    crate::may_read_secrets(&client, &ns).await;
    let mut flow = in_object_flow();
    let wait = json!({"type": "waitFor", "name": "credentials exist",
        "resource": {"kind": "Secret", "name": "${object.metadata.name}-credentials"},
        "condition": "Exist", "timeoutSeconds": 600});
    flow["steps"].as_array_mut().unwrap().insert(0, wait);
    create_flow(&client, &ns, "widgets", flow).await;
    for i in 0..12 {
        create_widget(&client, &ns, &format!("w{i}"), json!({"version": "one"})).await;
    }
    secret(&client, &ns, "ready-credentials").await;
    create_widget(&client, &ns, "ready", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "ready", "Running").await;
    eventually(20, "every waiting object counted as creating", || async {
        bound_summary(&client, &ns).await["creating"] == 12
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(12)).await;
    for i in 0..12 {
        let w = format!("w{i}");
        let status = widget_status(&client, &ns, &w).await;
        assert_eq!(
            status["phase"], "Creating",
            "{w} still waits, uncut: {status:#}"
        );
        assert!(config_map(&client, &ns, &format!("{w}-made-one"))
            .await
            .is_none());
    }
    let asked = std::time::Instant::now();
    secret(&client, &ns, "w3-credentials").await;
    wait_widget(&client, &ns, "w3", "Running").await;
    let took = asked.elapsed();
    assert!(config_map(&client, &ns, "w3-made-one").await.is_some());
    // A watch wakes it; the longest poll a wait could fall back to is far longer than this.
    assert!(
        took < std::time::Duration::from_secs(8),
        "served {took:?} after"
    );
    let w4 = widget_status(&client, &ns, "w4").await;
    assert_eq!(w4["phase"], "Creating", "the others still wait");
}

/// Flow `widgets`'s `status.bound` (null before its first summary).
async fn bound_summary(client: &Client, ns: &str) -> Value {
    let f = flows(client, ns).get("widgets").await.unwrap();
    f.data["status"]["bound"].clone()
}

/// Creates Secret `name` in `ns`.
async fn secret(client: &Client, ns: &str, name: &str) {
    let api = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns);
    let s: k8s_openapi::api::core::v1::Secret = serde_json::from_value(
        json!({"metadata": {"name": name}, "stringData": {"password": "x"}}),
    )
    .unwrap();
    api.create(&Default::default(), &s).await.unwrap();
}

/// Time an object's run spends queuing for a share of the controller's turns is not its own
/// time: with every work turn of the namespace held (as other flows' steps there would hold
/// them) for twice as long as the flow gives each object (`options.timeoutSeconds: 2`), the
/// object waits, then is served once turns are free, instead of failing "cut after 2 s".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_queued_for_a_turn_never_counts_against_an_objects_run() {
    use pseudoflow_controller::limits::MAX_STEPS_IN_CONTROLLER_PER_NAMESPACE;
    let (client, ns, ctx) = setup_with_context("inobj-queued", all_verbs()).await;
    let turns = ctx.binder.in_controller.turns().clone();
    let mut others = Vec::new();
    for i in 0..MAX_STEPS_IN_CONTROLLER_PER_NAMESPACE {
        others.push(turns.turn(&ns, &format!("another-flow-{i}")).await);
    }
    let mut flow = in_object_flow();
    flow["options"] = json!({"timeoutSeconds": 2});
    create_flow(&client, &ns, "widgets", flow).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let waiting = widget_status(&client, &ns, "w").await;
    assert!(
        waiting.is_null() || waiting["phase"] == "Creating",
        "nothing ran and nothing failed while every turn was taken: {waiting:#}"
    );
    assert!(config_map(&client, &ns, "w-made-one").await.is_none());
    drop(others);
    let status = wait_widget(&client, &ns, "w", "Running").await;
    assert!(
        status.get("message").is_none_or(Value::is_null),
        "{status:#}"
    );
    assert!(config_map(&client, &ns, "w-made-one").await.is_some());
    let told = events_on(&client, &ns, "Widget", "w").await;
    assert!(
        told.iter()
            .all(|(_, reason, _, _)| reason != "ObjectFailed"),
        "served at its first attempt, never cut: {told:?}"
    );
}

/// The in-object flow with a first step that fails until ConfigMap `<widget>-needed` exists (it
/// labels it), retried under `bind.retry` = `retry`.
fn needing_flow(retry: Value) -> Value {
    let mut flow = in_object_flow();
    flow["bind"]["retry"] = retry;
    let needs = json!({"type": "setLabel", "name": "needs",
        "target": {"kind": "ConfigMap", "name": "${object.metadata.name}-needed"},
        "labels": {"seen": "yes"}});
    flow["steps"].as_array_mut().unwrap().insert(0, needs);
    flow
}

/// The Events whose object is widget `name` (what `kubectl describe widget <name>` lists):
/// (type, reason, note, count).
async fn events_on(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
) -> Vec<(String, String, String, i32)> {
    let api = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns);
    let lp = ListParams::default().fields(&format!(
        "involvedObject.kind={kind},involvedObject.name={name}"
    ));
    let list = api.list(&lp).await.unwrap();
    list.items
        .into_iter()
        .map(|e| {
            let series = e.series.as_ref().and_then(|s| s.count);
            let count = series.or(e.count).unwrap_or(1);
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                count,
            )
        })
        .collect()
}

/// A failed object is tried again with capped exponential backoff (here 2 s doubling to 4 s),
/// its status naming the next attempt, until what its step needs appears: then it succeeds
/// without the object having changed (still generation 1, and the run is still the create's).
/// What happened is told on the object itself (`kubectl describe widget w`): each failure as
/// one folded `ObjectFailed` series, then `ObjectServed`; nothing of it on the bound flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_object_is_retried_with_backoff_until_what_it_needs_appears() {
    let (client, ns) = setup("inobj-retry", all_verbs()).await;
    let retry = json!({"backoffSeconds": 2, "maxBackoffSeconds": 4});
    create_flow(&client, &ns, "widgets", needing_flow(retry)).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    let first = wait_widget(&client, &ns, "w", "Failed").await;
    let message = first["message"].as_str().unwrap_or_default().to_string();
    assert!(message.starts_with("spec.steps[0]"), "{first:#}");
    assert!(
        message.contains("next attempt at ") && message.contains("(in 2 s)"),
        "the status names the next attempt: {first:#}"
    );
    // Tried again, the wait doubling up to its cap, though the object did not change.
    eventually(40, "tried again at the capped backoff", || async {
        let s = widget_status(&client, &ns, "w").await;
        let m = s["message"].as_str().unwrap_or_default();
        m.contains("attempt 3 failed") && m.contains("(in 4 s)")
    })
    .await;
    let failed = events_on(&client, &ns, "Widget", "w").await;
    let series: Vec<_> = failed
        .iter()
        .filter(|(t, r, _, _)| t == "Warning" && r == "ObjectFailed")
        .collect();
    assert_eq!(series.len(), 1, "one folded series: {failed:?}");
    assert!(series[0].3 >= 2, "repeats counted: {failed:?}");
    assert!(series[0].2.contains("spec.steps[0]"), "{failed:?}");
    // What it needs appears: the next attempt succeeds.
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    let needed = serde_json::from_value(json!({"metadata": {"name": "w-needed"}})).unwrap();
    cms.create(&Default::default(), &needed).await.unwrap();
    let done = wait_widget(&client, &ns, "w", "Running").await;
    assert!(done.get("message").is_none_or(Value::is_null), "{done:#}");
    let w = widgets(&client, &ns).get("w").await.unwrap();
    assert_eq!(w.metadata.generation, Some(1), "the object never changed");
    let made = config_map(&client, &ns, "w-made-one").await.expect("made");
    assert_eq!(
        made["event"], "create",
        "a retry runs with its run's trigger"
    );
    assert!(config_map(&client, &ns, "w-created").await.is_some());
    eventually(30, "ObjectServed on the object", || async {
        let evs = events_on(&client, &ns, "Widget", "w").await;
        evs.iter()
            .any(|(t, r, _, _)| t == "Normal" && r == "ObjectServed")
    })
    .await;
    let on_flow = events_on(&client, &ns, "PseudoFlow", "widgets").await;
    assert!(
        on_flow.iter().all(|(_, r, _, _)| !r.starts_with("Object")),
        "the object's Events are on the object: {on_flow:?}"
    );
}

/// A failure that no attempt can mend (the step cannot be rendered from this object: it names
/// a field the object does not have) is permanent: the status says it is not retried, and it
/// is not, until the object changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_is_not_retried_until_the_object_changes() {
    let (client, ns) = setup("inobj-permanent", all_verbs()).await;
    let retry = json!({"backoffSeconds": 1, "maxBackoffSeconds": 1});
    create_flow(&client, &ns, "widgets", needing_flow(retry)).await;
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    let needed = serde_json::from_value(json!({"metadata": {"name": "w-needed"}})).unwrap();
    cms.create(&Default::default(), &needed).await.unwrap();
    create_widget(&client, &ns, "w", json!({"colour": "red"})).await;
    let failed = wait_widget(&client, &ns, "w", "Failed").await;
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("spec.steps[1]"), "{failed:#}");
    assert!(message.contains("not retried"), "{failed:#}");
    let mark = mark_of(&client, &ns, "w").await;
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert_eq!(mark_of(&client, &ns, "w").await, mark, "not run again");
    assert_eq!(
        widget_status(&client, &ns, "w").await,
        failed,
        "not run again"
    );
    let evs = events_on(&client, &ns, "Widget", "w").await;
    let failures: Vec<_> = evs.iter().filter(|e| e.1 == "ObjectFailed").collect();
    assert_eq!(failures.len(), 1, "{evs:?}");
    assert_eq!(failures[0].3, 1, "told once: {evs:?}");
    // Changed, it runs again (and succeeds).
    let patch = json!({"spec": {"version": "one"}});
    widgets(&client, &ns)
        .patch("w", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_widget(&client, &ns, "w", "Running").await;
}

/// `bind.retry` is validated with a path-naming error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backoff_over_its_cap_is_refused_naming_the_field() {
    let (client, ns) = setup("inobj-retry-bad", all_verbs()).await;
    let retry = json!({"backoffSeconds": 30, "maxBackoffSeconds": 10});
    create_flow(&client, &ns, "widgets", needing_flow(retry)).await;
    let status = wait_status(&client, &ns, "widgets", 60, "invalid", |s| {
        s["reason"] == "InvalidSpec"
    })
    .await;
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.bind.retry.maxBackoffSeconds"),
        "{status:#}"
    );
}

/// A controller for namespace `ns` (as `setup` starts one), whose task can be stopped.
pub(crate) async fn start_controller(client: &Client, ns: &str) -> tokio::task::JoinHandle<()> {
    use pseudoflow_controller::{metrics::Metrics, run_controller, Context};
    use std::sync::Arc;
    let config = controller_config(client, ns).await;
    let ctl = Client::try_from(config.clone()).unwrap();
    let ctx = Context::new(
        ctl,
        crate::common::IMAGE.into(),
        Arc::new(Metrics::default()),
    );
    let ctx = Arc::new(ctx.with_config(config));
    tokio::spawn(run_controller(ctx, Some(ns.to_string())))
}

/// The served mark's retry fields: (failures in a row, when the last failed).
async fn retry_of(client: &Client, ns: &str, name: &str) -> (u64, i64) {
    let raw = mark_of(client, ns, name).await.unwrap_or_default();
    let m: Value = serde_json::from_str(&raw).unwrap_or_default();
    (m["n"].as_u64().unwrap_or(0), m["t"].as_i64().unwrap_or(0))
}

/// The retry schedule lives in the object's served mark: a controller restarted between two
/// attempts (its memory gone) tries the object again when its backoff is due, not at once and
/// not never, and it succeeds once what it needs appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_survives_a_controller_restart_and_keeps_its_backoff() {
    let client = crate::common::env().client().await.unwrap();
    crate::common::install_crd(&client).await;
    crate::common::apply(&client, widget().crd()).await;
    let ns = crate::common::FlowNamespace::new("inobj-restart")
        .rules(flow_rules(all_verbs()))
        .create(crate::common::env(), &client)
        .await;
    wait_served(&client, &ns).await;
    let first = start_controller(&client, &ns).await;
    let retry = json!({"backoffSeconds": 6, "maxBackoffSeconds": 6});
    create_flow(&client, &ns, "widgets", needing_flow(retry)).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    eventually(60, "the first failure marked", || async {
        retry_of(&client, &ns, "w").await.0 == 1
    })
    .await;
    first.abort();
    let _ = first.await;
    let (_, failed_at) = retry_of(&client, &ns, "w").await;
    let _second = start_controller(&client, &ns).await;
    eventually(60, "tried again by the new controller", || async {
        retry_of(&client, &ns, "w").await.0 == 2
    })
    .await;
    let (_, again_at) = retry_of(&client, &ns, "w").await;
    assert!(
        again_at - failed_at >= 6,
        "not before its backoff: failed at {failed_at}, again at {again_at}"
    );
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    let needed = serde_json::from_value(json!({"metadata": {"name": "w-needed"}})).unwrap();
    cms.create(&Default::default(), &needed).await.unwrap();
    wait_widget(&client, &ns, "w", "Running").await;
    assert_eq!(
        retry_of(&client, &ns, "w").await,
        (0, 0),
        "served: no retry left"
    );
}

/// `if` and `when` in a flow recorded in its objects: the controller reads the condition's
/// object as the flow's ServiceAccount (no pod) and runs `then` or `else`, and the step a
/// `when` guards only when it holds; a missing object counts as a missing path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_and_when_are_evaluated_in_the_controller() {
    let (client, ns) = setup("inobj-if", all_verbs()).await;
    let cm = |suffix: &str| {
        json!({"type": "apply", "manifests": format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${{object.metadata.name}}-{suffix}\n"
        )})
    };
    let condition = json!({"resource": {"kind": "ConfigMap",
        "name": "${object.metadata.name}-switch"},
        "jsonPath": ".data.on", "op": "equals", "value": "yes"});
    let mut flow = in_object_flow();
    flow["steps"] = json!([
        {"type": "if", "condition": condition, "then": [cm("then")], "else": [cm("else")]},
        {"type": "when", "condition": condition},
        cm("guarded"),
    ]);
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    let switch = json!({"metadata": {"name": "on-switch"}, "data": {"on": "yes"}});
    let switch = serde_json::from_value(switch).unwrap();
    cms.create(&Default::default(), &switch).await.unwrap();
    create_flow(&client, &ns, "widgets", flow).await;
    create_widget(&client, &ns, "on", json!({"version": "one"})).await;
    create_widget(&client, &ns, "off", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "on", "Running").await;
    wait_widget(&client, &ns, "off", "Running").await;
    let exists = |name: &'static str| {
        let client = client.clone();
        let ns = ns.clone();
        async move { config_map(&client, &ns, name).await.is_some() }
    };
    assert!(exists("on-then").await && !exists("on-else").await);
    assert!(exists("on-guarded").await, "the when held");
    assert!(exists("off-else").await && !exists("off-then").await);
    assert!(!exists("off-guarded").await, "the when did not hold");
}

/// The widget flow recorded in its objects, with its `onDelete` (it applies `<widget>-farewell`),
/// under `bind.retry` = `retry`.
fn on_delete_flow(retry: Value) -> Value {
    let mut flow = widget_flow(json!({"record": "Object", "retry": retry}));
    if retry.is_null() {
        flow["bind"].as_object_mut().unwrap().remove("retry");
    }
    flow
}

/// Whether widget `name` carries the finalizer of flow `widgets`.
async fn finalized(client: &Client, ns: &str, name: &str) -> bool {
    let fin = pseudoflow_controller::bind::object::finalizer_name(ns, "widgets");
    let w = widgets(client, ns).get_opt(name).await.unwrap();
    w.and_then(|w| w.metadata.finalizers)
        .is_some_and(|f| f.contains(&fin))
}

async fn delete_widget(client: &Client, ns: &str, name: &str) {
    widgets(client, ns)
        .delete(name, &Default::default())
        .await
        .unwrap();
}

/// A flow recorded in its objects with `onDelete` puts its finalizer on each object it serves
/// (as a kopf operator puts its own); deleting the object runs the `onDelete` steps in the
/// controller (`trigger.event` is `delete`), then our finalizer goes and so does the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_object_runs_its_on_delete_then_lets_it_go() {
    let (client, ns) = setup("inobj-ondel", all_verbs()).await;
    let mut flow = on_delete_flow(Value::Null);
    flow["onDelete"][0]["manifests"] = json!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-farewell\ndata:\n  event: ${trigger.event}\n  version: ${object.spec.version}\n"
    );
    create_flow(&client, &ns, "widgets", flow).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    assert!(finalized(&client, &ns, "w").await, "our finalizer on it");
    assert!(config_map(&client, &ns, "w-farewell").await.is_none());
    delete_widget(&client, &ns, "w").await;
    let shown = [
        Shown::object(widgets(&client, &ns), &ns, "w"),
        Shown::flow(&client, &ns, "widgets"),
    ];
    wait_until(&client, "the widget gone", 60, &shown, || async {
        widgets(&client, &ns).get_opt("w").await.unwrap().is_none()
    })
    .await;
    let farewell = config_map(&client, &ns, "w-farewell")
        .await
        .expect("onDelete ran");
    assert_eq!(farewell["event"], "delete");
    assert_eq!(farewell["version"], "one", "it saw the object");
    // Only the bound flow: no child flow ran it.
    let all = flows(&client, &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(all.items.len(), 1);
}

/// A failing `onDelete` (its first step needs ConfigMap `<widget>-needed`, which does not exist
/// yet) keeps the object, its status naming the failing step and the next attempt, and is tried
/// again with the flow's backoff; once what it needs appears, it succeeds and the object goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_on_delete_keeps_the_object_and_is_retried_until_it_succeeds() {
    let (client, ns) = setup("inobj-ondel-fail", all_verbs()).await;
    let mut flow = on_delete_flow(json!({"backoffSeconds": 2, "maxBackoffSeconds": 4}));
    let needs = json!({"type": "setLabel", "name": "needs",
        "target": {"kind": "ConfigMap", "name": "${object.metadata.name}-needed"},
        "labels": {"seen": "yes"}});
    flow["onDelete"].as_array_mut().unwrap().insert(0, needs);
    create_flow(&client, &ns, "widgets", flow).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    delete_widget(&client, &ns, "w").await;
    let shown = [
        Shown::object(widgets(&client, &ns), &ns, "w"),
        Shown::flow(&client, &ns, "widgets"),
    ];
    wait_until(&client, "the onDelete failure told", 60, &shown, || async {
        let s = widget_status(&client, &ns, "w").await;
        let m = s["message"].as_str().unwrap_or_default();
        s["phase"] == "Failed"
            && m.starts_with("spec.onDelete[0]")
            && m.contains("next attempt at ")
    })
    .await;
    eventually(40, "tried again at the capped backoff", || async {
        let s = widget_status(&client, &ns, "w").await;
        let m = s["message"].as_str().unwrap_or_default();
        m.contains("attempt 3 failed") && m.contains("(in 4 s)")
    })
    .await;
    let w = widgets(&client, &ns).get("w").await.unwrap();
    assert!(w.metadata.deletion_timestamp.is_some(), "being deleted");
    assert!(finalized(&client, &ns, "w").await, "kept by our finalizer");
    assert!(config_map(&client, &ns, "w-farewell").await.is_none());
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    let needed = serde_json::from_value(json!({"metadata": {"name": "w-needed"}})).unwrap();
    cms.create(&Default::default(), &needed).await.unwrap();
    wait_until(&client, "the widget gone", 30, &shown, || async {
        widgets(&client, &ns).get_opt("w").await.unwrap().is_none()
    })
    .await;
    assert!(config_map(&client, &ns, "w-farewell").await.is_some());
}

/// Deleting the bound flow lets its objects go: our finalizer comes off each object it served
/// (no `onDelete` runs), so the object can then be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_flow_releases_the_finalizer_of_its_objects() {
    let (client, ns) = setup("inobj-ondel-release", all_verbs()).await;
    create_flow(&client, &ns, "widgets", on_delete_flow(Value::Null)).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    assert!(finalized(&client, &ns, "w").await, "our finalizer on it");
    flows(&client, &ns)
        .delete("widgets", &Default::default())
        .await
        .unwrap();
    let shown = [
        Shown::object(widgets(&client, &ns), &ns, "w"),
        Shown::flow(&client, &ns, "widgets"),
    ];
    wait_until(&client, "the flow gone", 60, &shown, || async {
        flows(&client, &ns)
            .get_opt("widgets")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    assert!(
        !finalized(&client, &ns, "w").await,
        "our finalizer released"
    );
    delete_widget(&client, &ns, "w").await;
    eventually(30, "the widget gone", || async {
        widgets(&client, &ns).get_opt("w").await.unwrap().is_none()
    })
    .await;
    assert!(
        config_map(&client, &ns, "w-farewell").await.is_none(),
        "released: no onDelete ran"
    );
}

/// A flow no longer bound (its `bind` removed: now a plain flow) lets go of the objects it
/// finalized, as a deleted one does; no `onDelete` runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbinding_the_flow_releases_the_finalizer_of_its_objects() {
    let (client, ns) = setup("inobj-ondel-unbind", all_verbs()).await;
    create_flow(&client, &ns, "widgets", on_delete_flow(Value::Null)).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    assert!(finalized(&client, &ns, "w").await, "our finalizer on it");
    let plain = json!({"serviceAccountName": "flow",
        "steps": [{"type": "log", "message": "no longer bound"}]});
    create_flow(&client, &ns, "widgets", plain).await;
    let shown = [
        Shown::object(widgets(&client, &ns), &ns, "w"),
        Shown::flow(&client, &ns, "widgets"),
    ];
    wait_until(&client, "our finalizer released", 60, &shown, || async {
        !finalized(&client, &ns, "w").await
    })
    .await;
    delete_widget(&client, &ns, "w").await;
    eventually(30, "the widget gone", || async {
        widgets(&client, &ns).get_opt("w").await.unwrap().is_none()
    })
    .await;
    assert!(config_map(&client, &ns, "w-farewell").await.is_none());
}

/// A flow switched from `record: Object` to `record: Child` keeps the object's finalizer (the
/// same name) for the child it now makes, whose `onDelete` runs when the object is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_to_child_hands_the_finalizer_to_the_child() {
    let (client, ns) = setup("inobj-ondel-switch", all_verbs()).await;
    create_flow(&client, &ns, "widgets", on_delete_flow(Value::Null)).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    assert!(finalized(&client, &ns, "w").await, "our finalizer on it");
    create_flow(&client, &ns, "widgets", widget_flow(json!({}))).await;
    let child = pseudoflow_controller::bind::child::child_name("widgets", &ns, "w");
    let shown = [
        Shown::object(widgets(&client, &ns), &ns, "w"),
        Shown::flow(&client, &ns, "widgets"),
        Shown::flow(&client, &ns, &child),
    ];
    wait_until(&client, "its child made", 60, &shown, || async {
        flows(&client, &ns).get_opt(&child).await.unwrap().is_some()
    })
    .await;
    assert!(finalized(&client, &ns, "w").await, "still held");
    delete_widget(&client, &ns, "w").await;
    wait_until(&client, "the widget gone", 90, &shown, || async {
        widgets(&client, &ns).get_opt("w").await.unwrap().is_none()
    })
    .await;
    assert!(
        config_map(&client, &ns, "w-farewell").await.is_some(),
        "the child's onDelete ran"
    );
}

/// The bound flow `widgets`' `status.bound.record`, as the controller wrote it.
async fn record_shown(client: &Client, ns: &str) -> Option<String> {
    let f = flows(client, ns).get("widgets").await.unwrap();
    f.data["status"]["bound"]["record"]
        .as_str()
        .map(String::from)
}

/// Waits until flow `widgets` shows `status.bound.record: Object`, and asserts that widget `w`
/// has no child flow: it is served in itself.
pub(crate) async fn assert_recorded_in_object(client: &Client, ns: &str, w: &str) {
    eventually(30, "status.bound.record Object", || async {
        record_shown(client, ns).await.as_deref() == Some("Object")
    })
    .await;
    let child = pseudoflow_controller::bind::child::child_name("widgets", ns, w);
    assert!(
        flows(client, ns).get_opt(&child).await.unwrap().is_none(),
        "no child flow"
    );
}

/// A bound flow as a new user writes it, with no `bind.record`, takes the fast path whenever
/// every step runs in the controller: the widget is recorded in itself (no child flow, its
/// served mark) and the flow's status says `record: Object`. An edit that adds a step the
/// controller cannot run alone (an `approval`) makes it a flow with a child per widget, and
/// its status says `record: Child`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unset_record_is_the_object_until_a_step_needs_more_then_a_child_flow() {
    let (client, ns) = setup("inobj-default", all_verbs()).await;
    let mut flow = in_object_flow();
    flow["bind"].as_object_mut().unwrap().remove("record");
    create_flow(&client, &ns, "widgets", flow.clone()).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    wait_widget(&client, &ns, "w", "Running").await;
    assert!(config_map(&client, &ns, "w-made-one").await.is_some());
    eventually(30, "the served mark", || async {
        mark_of(&client, &ns, "w").await.is_some()
    })
    .await;
    assert_recorded_in_object(&client, &ns, "w").await;

    let steps = flow["steps"].as_array_mut().unwrap();
    steps.push(json!({"type": "approval", "name": "go", "message": "ok?"}));
    let patch = json!({"spec": {"steps": flow["steps"]}});
    flows(&client, &ns)
        .patch("widgets", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let child = pseudoflow_controller::bind::child::child_name("widgets", &ns, "w");
    eventually(60, "a child flow for the widget", || async {
        flows(&client, &ns).get_opt(&child).await.unwrap().is_some()
    })
    .await;
    eventually(30, "status.bound.record Child", || async {
        record_shown(&client, &ns).await.as_deref() == Some("Child")
    })
    .await;
}
