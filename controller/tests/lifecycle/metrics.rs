//! The controller's metrics end to end on testenv: runs counted, step durations to the sub-second
//! for every step type, a running step's age and active flows; a deleted flow leaves no series.

use std::sync::Arc;
use std::time::Duration;

use pseudoflow_controller::metrics::Metrics;
use serde_json::json;

use crate::common::api::eventually;
use crate::common::shorthand::{cm_rules, exec, mark};
use crate::common::{apply, create_flow, prepare, start_controller_with, wait_done};

/// One HTTP GET on 127.0.0.1:`port`; the raw response.
async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut last_err = None;
    for _ in 0..50 {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(mut sock) => {
                sock.write_all(
                    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .await
                .unwrap();
                let mut out = String::new();
                sock.read_to_string(&mut out).await.unwrap();
                return out;
            }
            Err(e) => last_err = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("metrics endpoint not reachable: {last_err:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_runs_step_durations_and_active_flows() {
    let (client, ns) = prepare("metrics", cm_rules(), json!([])).await;
    let metrics = Arc::new(Metrics::default());
    let ctl = start_controller_with(&client, &ns, metrics.clone());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = tokio::spawn(pseudoflow_controller::http::serve_metrics(
        ([127, 0, 0, 1], port).into(),
        metrics.clone(),
    ));
    create_flow(&client, &ns, "good", json!({"serviceAccountName": "flow", "steps": [
        {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "gate", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 300},
        mark(&ns, "made"),
        exec("true")
    ]}))
    .await;
    create_flow(
        &client,
        &ns,
        "bad",
        json!({"serviceAccountName": "flow", "steps": [exec("exit 1")]}),
    )
    .await;
    let bad = wait_done(&client, &ns, "bad", 60).await;
    assert_eq!(bad["phase"], "Failed");
    eventually(30, "one active flow while `good` waits", || async {
        metrics.render().contains("\npseudoflow_active_flows 1\n")
    })
    .await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "namespace": ns}})).await;
    let good = wait_done(&client, &ns, "good", 60).await;
    assert_eq!(good["phase"], "Succeeded", "{good:#}");
    eventually(10, "no active flow", || async {
        metrics.render().contains("\npseudoflow_active_flows 0\n")
    })
    .await;
    let text = metrics.render();
    for line in [
        format!("pseudoflow_runs_total{{flow=\"{ns}/good\",status=\"Succeeded\"}} 1"),
        format!("pseudoflow_runs_total{{flow=\"{ns}/bad\",status=\"Failed\"}} 1"),
        format!(
            "pseudoflow_step_duration_seconds_count{{flow=\"{ns}/good\",step_type=\"waitFor\"}} 1"
        ),
        format!(
            "pseudoflow_step_duration_seconds_count{{flow=\"{ns}/good\",step_type=\"apply\"}} 1"
        ),
        format!(
            "pseudoflow_step_duration_seconds_count{{flow=\"{ns}/good\",step_type=\"exec\"}} 1"
        ),
        format!("pseudoflow_step_duration_seconds_count{{flow=\"{ns}/bad\",step_type=\"exec\"}} 1"),
    ] {
        assert!(
            text.contains(&format!("{line}\n")),
            "missing {line}:\n{text}"
        );
    }
    assert!(
        !text.contains(&format!("flow=\"{ns}/good\",status=\"Failed\"")),
        "{text}"
    );
    let response = http_get(port, "/metrics").await;
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    let body = response.split_once("\r\n\r\n").unwrap().1;
    assert_eq!(body, metrics.render(), "the endpoint serves render()");
    server.abort();
    ctl.abort();
}

/// The value of the series `name{labels}` in `text`, if present.
fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name_and_labels} ")))
        .map(|v| v.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_type_is_timed_to_the_sub_second_a_running_step_shows_its_age_and_a_deleted_flow_leaves_no_series(
) {
    let (client, ns) = prepare("metrics-steps", cm_rules(), json!([])).await;
    let metrics = Arc::new(Metrics::default());
    let ctl = start_controller_with(&client, &ns, metrics.clone());
    let flow = format!("{ns}/timed");
    create_flow(&client, &ns, "timed", json!({"serviceAccountName": "flow", "steps": [
        {"type": "log", "message": "starting"},
        {"type": "eval", "expression": "1 + 1", "var": "two"},
        {"type": "loop", "forEach": ["a"], "steps": [mark(&ns, "made-${item}")]},
        {"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "never", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 600}
    ]}))
    .await;
    eventually(60, "the waitFor step reported as running", || async {
        sample(
            &metrics.render(),
            &format!("pseudoflow_step_running_seconds{{flow=\"{flow}\",step_type=\"waitFor\"}}"),
        )
        .is_some_and(|age| age > 0.0)
    })
    .await;
    let text = metrics.render();
    let series = |ty: &str, what: &str| {
        sample(
            &text,
            &format!(
                "pseudoflow_step_duration_seconds_{what}{{flow=\"{flow}\",step_type=\"{ty}\"}}"
            ),
        )
        .unwrap_or_else(|| panic!("no {what} for {ty}:\n{text}"))
    };
    // Controller-local and structural steps are timed too, not only Job steps.
    for ty in ["log", "eval", "loop", "apply"] {
        assert_eq!(series(ty, "count"), 1.0, "{ty}:\n{text}");
    }
    // Controller-local steps take milliseconds: they land in the sub-second buckets.
    for ty in ["log", "eval"] {
        assert!(series(ty, "sum") < 0.5, "{ty}:\n{text}");
    }
    // A Job step's time is not rounded to whole seconds.
    let apply = series("apply", "sum");
    assert!(
        apply > 0.0 && apply.fract() != 0.0,
        "apply took {apply}:\n{text}"
    );
    assert!(
        series("loop", "sum") >= apply,
        "the loop contains the apply:\n{text}"
    );
    assert!(text.contains("\npseudoflow_active_flows 1\n"), "{text}");

    // Deleting the flow mid-run drops its series, and no later reconcile brings them back.
    crate::common::flows(&client, &ns)
        .delete("timed", &Default::default())
        .await
        .unwrap();
    eventually(30, "no active flow after the deletion", || async {
        metrics.render().contains("\npseudoflow_active_flows 0\n")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let text = metrics.render();
    assert!(text.contains("\npseudoflow_active_flows 0\n"), "{text}");
    assert!(
        !text.contains(&flow),
        "no series of the deleted flow:\n{text}"
    );
    ctl.abort();
}
