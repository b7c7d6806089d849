//! `type: approval`, end to end on testenv's real kube-apiserver, which calls both admission
//! webhooks (validating: who may approve; mutating: the stamp recording who did): the run waits
//! with phase, message and an Event saying so; a user with edit rights but not `approve` is
//! refused, and so is a stamp written by a client; an allowed user's approval continues the run
//! and status records their name, groups and time; an approval from an earlier run does not
//! carry over; a reject fails the run naming who rejected; and inside a rolling loopNodes each
//! node needs its own approval. The attacks on approvals (a forged review from the network, a
//! forged stamp without the webhook, a retry, two gates of one name) are in
//! `adversarial/approvals.rs`.

use std::time::Duration;

use crate::common::admission::{editor_and_approver, start_controller_with_key, start_webhooks};
use crate::common::approval::*;
use crate::common::*;
use pseudoflow_controller::approval::{Decision, Key, Stamp};
use pseudoflow_controller::http::tls;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_by_an_allowed_user_continues_the_run_and_is_recorded_a_reject_fails_it() {
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "patch"]}]);
    let (client, ns) = prepare("approval", rules, json!([])).await;
    editor_and_approver(&client, &ns).await;
    let key = Key::random();
    let ctl = start_controller_with_key(&client, &ns, &key);
    create_flow(&client, &ns, "gated", gated_between_jobs(&ns)).await;
    let vwc = start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns).await;

    // Waiting: phase, reason, message, the step's entry and an Event.
    let st = wait_waiting(&client, &ns, "gated", "").await;
    assert_eq!(st["phase"], "Running", "{st:#}");
    assert_eq!(st["message"], "waiting for approval: gate", "{st:#}");
    let gate = step(&st, "spec.steps[1]");
    assert_eq!(gate["phase"], "Running", "{st:#}");
    assert_eq!(gate["message"], "waiting for approval: gate", "{st:#}");
    let events = flow_events(&client, &ns, "gated").await;
    let waiting = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("WaitingForApproval"))
        .unwrap_or_else(|| panic!("no WaitingForApproval Event: {events:#?}"));
    let note = waiting.message.clone().unwrap_or_default();
    assert!(
        note.contains("waiting for approval: gate (check the canary)")
            && note.contains("ops.example.com/approve=gate"),
        "{note}"
    );

    // Edit rights do not approve; nobody writes the stamp by hand, not even an admin.
    let (ok, out) = annotate(&ns, "gated", Some("tenant"), "ops.example.com/approve=gate").await;
    assert!(!ok && out.contains("tenant may not approve"), "{out}");
    let forged = Stamp {
        decision: Decision::Approve,
        step: "gate".into(),
        user: "boss".into(),
        groups: vec![],
        time: pseudoflow_controller::approval::now_ms(),
        run: st["run"]["id"].as_str().unwrap().into(),
    }
    .sign(&Key::random(), &ns, "gated");
    let users = [Some("tenant"), None];
    assert_stamp_refused(&ns, "ops.example.com/approved-by", &forged, &users).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let st = flows(&client, &ns).get("gated").await.unwrap().data["status"].clone();
    assert_eq!(st["reason"], "WaitingForApproval", "{st:#}");
    assert!(config_map_exists(&client, &ns, "before").await);
    assert!(
        !config_map_exists(&client, &ns, "after").await,
        "nothing after the gate ran"
    );

    // The approver approves: the run goes on, and status says who, in which groups, when.
    let before = tls::unix_now();
    let (ok, out) = annotate(&ns, "gated", Some("boss"), "ops.example.com/approve=gate").await;
    assert!(ok, "{out}");
    let st = wait_done(&client, &ns, "gated", 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert!(config_map_exists(&client, &ns, "after").await);
    let gate = step(&st, "spec.steps[1]");
    assert_eq!(gate["phase"], "Succeeded", "{st:#}");
    let record = &gate["approval"];
    assert_eq!(record["decision"], "Approved", "{st:#}");
    assert_eq!(record["user"], "boss", "{st:#}");
    assert!(
        record["groups"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("system:authenticated"))),
        "{st:#}"
    );
    assert!(
        crate::common::api::unix(&record["time"]) >= before - 1,
        "{st:#}"
    );
    assert!(
        gate["message"]
            .as_str()
            .unwrap()
            .starts_with("approved by boss"),
        "{st:#}"
    );
    let first_run = st["run"]["id"].as_str().unwrap().to_string();

    // A new run: the approval (still on the flow) was for the earlier run and does not carry over.
    // Waited for by what status says, not for a fixed time: the controller may take seconds to
    // get to the flow under load.
    request_run(&client, &ns, "gated", "2").await;
    let not_accepted = |st: &Value| {
        st["message"].as_str().is_some_and(|m| {
            m.starts_with("waiting for approval: gate (") && m.contains("not accepted")
        })
    };
    let st = wait_status(
        &client,
        &ns,
        "gated",
        30,
        "the new run waiting, the earlier approval not accepted",
        |st| {
            st["reason"] == "WaitingForApproval"
                && st["run"]["id"] != first_run.as_str()
                && not_accepted(st)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st2 = flows(&client, &ns).get("gated").await.unwrap().data["status"].clone();
    assert_eq!(st2["phase"], "Running", "{st2:#}");
    assert_eq!(st2["run"]["id"], st["run"]["id"]);
    assert!(not_accepted(&st2), "{st2:#}");

    // Approving a step that is not waiting does nothing: once the controller has read the
    // annotation (the note on the earlier approval is gone), the gate still waits.
    let (ok, out) = annotate(&ns, "gated", Some("boss"), "ops.example.com/approve=other").await;
    assert!(ok, "{out}");
    let st3 = wait_status(
        &client,
        &ns,
        "gated",
        30,
        "the approval of another step read",
        |st| st["message"] == "waiting for approval: gate",
    )
    .await;
    assert_eq!(st3["reason"], "WaitingForApproval", "{st3:#}");
    assert_eq!(st3["run"]["id"], st["run"]["id"], "{st3:#}");
    assert_eq!(step(&st3, "spec.steps[1]")["phase"], "Running", "{st3:#}");

    // A reject fails the run, naming who rejected.
    let (ok, out) = annotate(&ns, "gated", Some("tenant"), "ops.example.com/reject=gate").await;
    assert!(!ok && out.contains("tenant may not reject"), "{out}");
    let (ok, out) = annotate(&ns, "gated", Some("boss"), "ops.example.com/reject=gate").await;
    assert!(ok, "{out}");
    let st = wait_done(&client, &ns, "gated", 30).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert!(
        st["message"].as_str().unwrap().contains("rejected by boss"),
        "{st:#}"
    );
    let gate = step(&st, "spec.steps[1]");
    assert_eq!(gate["approval"]["decision"], "Rejected", "{st:#}");
    assert_eq!(gate["approval"]["user"], "boss", "{st:#}");
    assert!(
        st["steps"].as_array().unwrap().len() == 2,
        "the step after the gate never ran: {st:#}"
    );

    remove_webhooks(&client, &vwc).await;
    ctl.abort();
}

fn passed(st: &Value) -> u64 {
    step(st, "spec.steps[0].steps[0]")["instances"]["succeeded"]
        .as_u64()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_a_rolling_loop_nodes_each_node_needs_its_own_approval() {
    let nodes =
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]);
    let (client, ns) = prepare("approval-roll", json!([]), nodes).await;
    editor_and_approver(&client, &ns).await;
    let key = Key::random();
    let ctl = start_controller_with_key(&client, &ns, &key);
    create_flow(
        &client,
        &ns,
        "gated",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "loopNodes", "selector": "", "maxParallel": 1, "steps": [
                {"type": "approval", "name": "next-node"},
                {"type": "log", "message": "${node} done"},
            ]}
        ]}),
    )
    .await;
    let vwc = start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns).await;
    let total = 3; // cp-0, worker-0, worker-1
    for n in 0..total {
        let st = wait_status(&client, &ns, "gated", 60, "the next node waiting", |st| {
            st["reason"] == "WaitingForApproval" && passed(st) == n
        })
        .await;
        let msg = st["message"].as_str().unwrap();
        assert!(msg.starts_with("waiting for approval: next-node"), "{st:#}");
        // The previous node's approval is still on the flow: it does not let this node go.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let st = flows(&client, &ns).get("gated").await.unwrap().data["status"].clone();
        assert_eq!(
            passed(&st),
            n,
            "node {n} went without its own approval: {st:#}"
        );
        if n > 0 {
            annotate(&ns, "gated", Some("boss"), "ops.example.com/approve-").await;
        }
        let (ok, out) = annotate(
            &ns,
            "gated",
            Some("boss"),
            "ops.example.com/approve=next-node",
        )
        .await;
        assert!(ok, "{out}");
    }
    let st = wait_done(&client, &ns, "gated", 60).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert_eq!(passed(&st), total, "{st:#}");
    // Each node's approval is told by an Event naming who gave it.
    let approved = flow_events(&client, &ns, "gated")
        .await
        .into_iter()
        .filter(|e| {
            e.message
                .as_deref()
                .is_some_and(|m| m.contains("approved by boss"))
        })
        .count();
    assert_eq!(approved as u64, total);
    remove_webhooks(&client, &vwc).await;
    ctl.abort();
}
