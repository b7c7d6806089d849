//! `ops.example.com/stop` (what `kubectl pf stop` sets) through the mutating webhook: the run
//! stops and its status names who asked, as the API server authenticated them; a client
//! writing the record of who stopped itself is refused, whoever it is.

use crate::common::admission::{editor_and_approver, start_controller_with_key, start_webhooks};
use crate::common::approval::*;
use crate::common::*;
use pseudoflow_controller::approval::Key;
use pseudoflow_controller::stopped_by::StopStamp;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_is_recorded_with_who_asked_and_nobody_writes_that_record_by_hand() {
    let (client, ns) = prepare("stop-by", json!([]), json!([])).await;
    editor_and_approver(&client, &ns).await;
    let key = Key::random();
    let ctl = start_controller_with_key(&client, &ns, &key);
    let sleeping = json!({"steps": [{"type": "sleep", "name": "a long wait", "seconds": 600}]});
    create_flow(&client, &ns, "gated", sleeping).await;
    let _hooks = start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns).await;
    let st = wait_status(&client, &ns, "gated", 30, "running", |st| {
        st["phase"] == "Running" && st["run"]["id"].is_string()
    })
    .await;
    let run = st["run"]["id"].as_str().unwrap().to_string();

    // Nobody writes who stopped: not a tenant, not an admin, not even with a valid-looking
    // stamp (it is signed by another key, and a client never writes it at all).
    let forged = StopStamp {
        run: run.clone(),
        user: "boss".into(),
        groups: vec![],
        time: 0,
    }
    .sign(&Key::random(), &ns, "gated");
    let users = [Some("tenant"), None];
    assert_stamp_refused(&ns, "ops.example.com/stopped-by", &forged, &users).await;

    // An editor stops the run (edit rights suffice): Aborted, naming them.
    let (ok, out) = annotate(
        &ns,
        "gated",
        Some("tenant"),
        &format!("ops.example.com/stop={run}"),
    )
    .await;
    assert!(ok, "{out}");
    let st = wait_status(&client, &ns, "gated", 30, "Aborted", |st| {
        st["phase"] == "Aborted"
    })
    .await;
    let message = st["message"].as_str().unwrap_or_default();
    assert!(message.contains("stopped by tenant: "), "{st:#}");
    let events = flow_events(&client, &ns, "gated").await;
    let told = events
        .iter()
        .filter_map(|e| e.message.clone())
        .any(|m| m.contains("stopped by tenant"));
    assert!(told, "an Event names who stopped it: {events:#?}");
    ctl.abort();
}
