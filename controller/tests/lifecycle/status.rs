//! What status says about runs: `lastRunTime` (when the latest run started) and the cap on
//! `status.steps` (`MAX_STEP_ENTRIES` entries; the rest counted in `stepsOmitted`).

use pseudoflow_crd::status::MAX_STEP_ENTRIES;
use serde_json::json;

use crate::common::api::{unix, wait_next_run};
use crate::common::{create_flow, request_run, setup, wait_done};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_run_time_is_when_the_latest_run_started() {
    let (client, ns, ctl) = setup("lastrun", json!([]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "f",
        json!({
            "serviceAccountName": "flow",
            "steps": [{"type": "log", "message": "hello"}]
        }),
    )
    .await;
    let first = wait_done(&client, &ns, "f", 60).await;
    assert_eq!(first["phase"], "Succeeded", "{first:#}");
    assert_eq!(first["lastRunTime"], first["run"]["startedAt"], "{first:#}");
    // Timestamps have whole seconds: let one pass so the second run's start differs.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    request_run(&client, &ns, "f", "again").await;
    let second = wait_next_run(&client, &ns, "f", &first["run"]["id"]).await;
    assert_eq!(second["phase"], "Succeeded", "{second:#}");
    assert_eq!(
        second["lastRunTime"], second["run"]["startedAt"],
        "{second:#}"
    );
    assert!(
        unix(&second["lastRunTime"]) > unix(&first["lastRunTime"]),
        "{} then {}",
        first["lastRunTime"],
        second["lastRunTime"]
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_steps_are_capped_and_the_rest_counted() {
    let (client, ns, ctl) = setup("cap", json!([]), json!([])).await;
    let extra = 7;
    let steps: Vec<_> = (0..MAX_STEP_ENTRIES + extra)
        .map(|i| json!({"type": "log", "message": format!("step {i}")}))
        .collect();
    create_flow(
        &client,
        &ns,
        "many",
        json!({"serviceAccountName": "flow", "steps": steps}),
    )
    .await;
    let st = wait_done(&client, &ns, "many", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{}", st["message"]);
    let entries = st["steps"].as_array().unwrap();
    assert_eq!(entries.len(), MAX_STEP_ENTRIES);
    assert_eq!(st["stepsOmitted"], extra, "{}", st["progress"]);
    assert_eq!(entries[0]["path"], "spec.steps[0]");
    assert_eq!(
        entries[MAX_STEP_ENTRIES - 1]["path"],
        format!("spec.steps[{}]", MAX_STEP_ENTRIES - 1),
        "the first entries are kept, in order"
    );
    assert_eq!(
        st["progress"],
        format!("{0}/{0}", MAX_STEP_ENTRIES + extra),
        "progress still counts every step"
    );
    ctl.abort();
}
