//! `spec.schedule` and `spec.suspend` end to end on a real control plane (testenv): a seconds
//! schedule fires and records last/nextScheduleTime, suspend stops new runs (scheduled or not),
//! Forbid skips the slots that come while a long run is active, and a controller that was down
//! across several slots starts exactly one catch-up run (none when that slot is past
//! `startingDeadlineSeconds`: it is told by a `ScheduleMissed` Event). The slot arithmetic
//! itself is unit-tested in controller/src/reconcile/schedule.rs; these check what a person
//! sees on the cluster.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::api::{eventually, unix};
use crate::common::{create_flow, flow_events, flows, setup, start_controller, wait_status};

/// Ids of the runs of flow `name` that ended well, from their `RunSucceeded` Events.
async fn succeeded_runs(client: &Client, ns: &str, name: &str) -> Vec<String> {
    flow_events(client, ns, name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("RunSucceeded"))
        .filter_map(|e| e.message)
        .collect()
}

async fn reasons(client: &Client, ns: &str, name: &str) -> Vec<String> {
    flow_events(client, ns, name)
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

async fn set_suspend(client: &Client, ns: &str, name: &str, suspend: bool) {
    flows(client, ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": suspend}})),
        )
        .await
        .unwrap();
}

fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

fn log_flow(schedule: &str) -> Value {
    json!({"schedule": schedule, "steps": [{"type": "log", "message": "tick"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seconds_schedule_fires_and_records_last_and_next_schedule_time() {
    let (client, ns, ctl) = setup("sched-fires", json!([]), json!([])).await;
    create_flow(&client, &ns, "tick", log_flow("*/3 * * * * *")).await;
    // Before its first slot nothing has run, but the next slot is known.
    let first = wait_status(&client, &ns, "tick", 30, "a first scheduled run", |s| {
        s["phase"] == "Succeeded" && s["lastScheduleTime"].is_string()
    })
    .await;
    let last = unix(&first["lastScheduleTime"]);
    let next = unix(&first["nextScheduleTime"]);
    assert_eq!(last % 3, 0, "a slot of */3 seconds: {first:#}");
    assert_eq!(next - last, 3, "{first:#}");
    let trigger = first["run"]["trigger"].as_str().unwrap().to_string();
    assert!(trigger.starts_with("schedule "), "{first:#}");
    // It fires again on the following slots, each a run of its own.
    let later = wait_status(&client, &ns, "tick", 30, "a later slot", |s| {
        s["phase"] == "Succeeded" && unix(&s["lastScheduleTime"]) >= last + 6
    })
    .await;
    assert_ne!(later["run"]["id"], first["run"]["id"], "{later:#}");
    assert!(succeeded_runs(&client, &ns, "tick").await.len() >= 2);
    // `kubectl get` shows the column.
    let ns2 = ns.clone();
    let (ok, out) =
        tokio::task::spawn_blocking(move || crate::common::kubectl(&["get", "pf", "-n", &ns2]))
            .await
            .unwrap();
    assert!(ok && out.contains("LAST SCHEDULE"), "{out}");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_stops_new_runs_scheduled_or_not() {
    let (client, ns, ctl) = setup("sched-suspend", json!([]), json!([])).await;
    // Unscheduled and suspended from the start: no run at all.
    create_flow(
        &client,
        &ns,
        "held",
        json!({"suspend": true, "steps": [{"type": "log", "message": "x"}]}),
    )
    .await;
    let held = wait_status(&client, &ns, "held", 30, "Pending", |s| {
        s["phase"] == "Pending"
    })
    .await;
    assert!(
        held["message"].as_str().unwrap().contains("suspended"),
        "{held:#}"
    );
    // Scheduled: runs, then suspended, no more runs and no next slot.
    create_flow(&client, &ns, "tick", log_flow("*/2 * * * * *")).await;
    wait_status(&client, &ns, "tick", 30, "a first run", |s| {
        s["phase"] == "Succeeded"
    })
    .await;
    set_suspend(&client, &ns, "tick", true).await;
    wait_status(&client, &ns, "tick", 30, "no next slot", |s| {
        s["nextScheduleTime"].is_null()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs = succeeded_runs(&client, &ns, "tick").await.len();
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        succeeded_runs(&client, &ns, "tick").await.len(),
        runs,
        "a suspended flow ran"
    );
    let held = flows(&client, &ns).get("held").await.unwrap().data["status"].clone();
    assert!(held["run"].is_null(), "{held:#}");
    assert!(succeeded_runs(&client, &ns, "held").await.is_empty());
    // Resumed: the unscheduled flow runs its spec, the scheduled one fires again.
    set_suspend(&client, &ns, "held", false).await;
    set_suspend(&client, &ns, "tick", false).await;
    wait_status(&client, &ns, "held", 30, "its run", |s| {
        s["phase"] == "Succeeded"
    })
    .await;
    eventually(30, "tick fires again", || async {
        succeeded_runs(&client, &ns, "tick").await.len() > runs
    })
    .await;
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbid_skips_the_slots_that_come_while_a_long_run_is_active() {
    let (client, ns, ctl) = setup("sched-forbid", json!([]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "long",
        json!({
            "schedule": "*/2 * * * * *",
            "options": {"concurrencyPolicy": "Forbid"},
            "steps": [{"type": "sleep", "seconds": 7}, {"type": "log", "message": "done"}]
        }),
    )
    .await;
    let first = wait_status(&client, &ns, "long", 30, "a first run", |s| {
        s["phase"] == "Running" && s["lastScheduleTime"].is_string()
    })
    .await;
    let run1 = first["run"]["id"].clone();
    let slot1 = unix(&first["lastScheduleTime"]);
    // Later slots come while it runs: recorded as served, skipped, the run goes on.
    let skipping = wait_status(&client, &ns, "long", 30, "a skipped slot", |s| {
        unix(&s["lastScheduleTime"]) > slot1
    })
    .await;
    assert_eq!(skipping["run"]["id"], run1, "{skipping:#}");
    assert!(
        skipping["queuedRun"].is_null(),
        "a skipped slot is not queued: {skipping:#}"
    );
    assert!(reasons(&client, &ns, "long")
        .await
        .iter()
        .any(|r| r == "ScheduleSkipped"));
    // The run ends well (not replaced); the first slot after its end starts the next one.
    let second = wait_status(&client, &ns, "long", 60, "a second run", |s| {
        s["run"]["id"] != run1
    })
    .await;
    let runs = succeeded_runs(&client, &ns, "long").await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs[0].contains(run1.as_str().unwrap()), "{runs:?}");
    assert!(!reasons(&client, &ns, "long")
        .await
        .iter()
        .any(|r| r == "RunReplaced"));
    assert!(unix(&second["run"]["startedAt"]) >= slot1 + 7, "{second:#}");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_down_across_several_slots_starts_one_catch_up_run() {
    let (client, ns, first_ctl) = setup("sched-catchup", json!([]), json!([])).await;
    create_flow(&client, &ns, "tick", log_flow("*/10 * * * * *")).await;
    let first = wait_status(&client, &ns, "tick", 30, "a first run", |s| {
        s["phase"] == "Succeeded"
    })
    .await;
    first_ctl.abort();
    let _ = first_ctl.await;
    let slot1 = unix(&first["lastScheduleTime"]);
    assert_eq!(succeeded_runs(&client, &ns, "tick").await.len(), 1);
    // Down across slot1+10 and slot1+20 (and more), back 3 s after a slot, 7 s before the next.
    let back = slot1 + 33;
    tokio::time::sleep(Duration::from_secs(
        u64::try_from(back - now()).unwrap_or(0),
    ))
    .await;
    let ctl = start_controller(&client, &ns);
    let caught = wait_status(&client, &ns, "tick", 6, "a catch-up run", |s| {
        s["phase"] == "Succeeded" && unix(&s["lastScheduleTime"]) > slot1
    })
    .await;
    // The latest missed slot, once; not one run per missed slot.
    assert_eq!(unix(&caught["lastScheduleTime"]), slot1 + 30, "{caught:#}");
    assert_eq!(unix(&caught["nextScheduleTime"]), slot1 + 40, "{caught:#}");
    let until = slot1 + 39;
    tokio::time::sleep(Duration::from_secs(
        u64::try_from(until - now()).unwrap_or(0),
    ))
    .await;
    let runs = succeeded_runs(&client, &ns, "tick").await;
    assert_eq!(runs.len(), 2, "one run before, one catch-up: {runs:?}");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_missed_past_the_starting_deadline_does_not_run_and_is_told() {
    let (client, ns, first_ctl) = setup("sched-deadline", json!([]), json!([])).await;
    let mut spec = log_flow("*/10 * * * * *");
    spec["startingDeadlineSeconds"] = json!(3);
    create_flow(&client, &ns, "tick", spec).await;
    let first = wait_status(&client, &ns, "tick", 30, "a first run", |s| {
        s["phase"] == "Succeeded"
    })
    .await;
    first_ctl.abort();
    let _ = first_ctl.await;
    let slot1 = unix(&first["lastScheduleTime"]);
    // Down across slot1+10, +20 and +30; back 4 s after slot1+30, past the 3 s deadline, and
    // 6 s before slot1+40 (the wait below ends before it).
    let back = slot1 + 34;
    tokio::time::sleep(Duration::from_secs(
        u64::try_from(back - now()).unwrap_or(0),
    ))
    .await;
    let ctl = start_controller(&client, &ns);
    let missed = wait_status(&client, &ns, "tick", 5, "the missed slot served", |s| {
        unix(&s["lastScheduleTime"]) > slot1
    })
    .await;
    // Served without a run: the latest slot was too late, and no older one is caught up.
    assert_eq!(unix(&missed["lastScheduleTime"]), slot1 + 30, "{missed:#}");
    assert_eq!(succeeded_runs(&client, &ns, "tick").await.len(), 1);
    let notes: Vec<String> = flow_events(&client, &ns, "tick")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ScheduleMissed"))
        .filter_map(|e| e.message)
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("startingDeadlineSeconds (3s)"),
        "{notes:?}"
    );
    // The next slot, on time, runs as usual.
    let next = wait_status(&client, &ns, "tick", 12, "the next slot's run", |s| {
        s["phase"] == "Succeeded" && unix(&s["lastScheduleTime"]) == slot1 + 40
    })
    .await;
    assert_eq!(
        succeeded_runs(&client, &ns, "tick").await.len(),
        2,
        "{next:#}"
    );
    ctl.abort();
}
