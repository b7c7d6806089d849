//! A schedule's `timeZone`, end to end on testenv, as `status.nextScheduleTime` shows it (the
//! slot arithmetic is unit-tested in controller/src/reconcile/schedule.rs).

use serde_json::{json, Value};

use crate::common::{create_flow, setup, wait_status};

/// A controller-local step that says `text`, so the branch taken shows in status.
fn say(text: &str) -> Value {
    json!({"type": "log", "message": text})
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
