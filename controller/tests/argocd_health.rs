//! The Argo CD health check (`charts/pseudoflow-operator/argocd/health.lua`) against statuses the
//! controller really wrote on testenv: a succeeded, a failed, an invalid and a running flow are
//! read back from the API server and handed to the Lua script as Argo CD would (`obj`), run by
//! `lua5.4` (installed by `charts/install-tools.sh`). A library flow, a scheduled flow before its
//! first slot and a flow created suspended are read back as the controller left them (phase
//! `Pending`, a reason saying why) and must be Healthy: settled, so a later sync wave starts.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::Client;
use pseudoflow_controller::flow::flow_resource;
use serde_json::{json, Value};

use pseudoflow_test_support as common;

use common::harness::{create_flow, setup, wait_done};

/// `v` as a Lua table constructor (JSON null becomes an absent field, as in Argo CD).
fn lua_literal(v: &Value) -> String {
    match v {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => lua_string(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(lua_literal).collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::Object(map) => {
            let parts: Vec<String> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("[{}] = {}", lua_string(k), lua_literal(v)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
    }
}

fn lua_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\{}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Runs the chart's health script on `obj`; returns (status, message).
fn health(obj: &Value) -> (String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("charts/pseudoflow-operator/argocd/health.lua");
    let program = format!(
        "local env = setmetatable({{obj = {}}}, {{__index = _G}})\n\
         local hs = assert(loadfile({}, 't', env))()\n\
         io.write(hs.status, '\\n', hs.message)\n",
        lua_literal(obj),
        lua_string(&script.display().to_string())
    );
    let out = Command::new("lua5.4")
        .args(["-e", &program])
        .output()
        .expect("lua5.4 not found: run `bash charts/install-tools.sh`");
    assert!(
        out.status.success(),
        "lua: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (status, message) = text.split_once('\n').unwrap();
    (status.to_string(), message.to_string())
}

async fn object(client: &Client, ns: &str, name: &str) -> Value {
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &flow_resource());
    serde_json::to_value(flows.get(name).await.unwrap()).unwrap()
}

#[test]
fn lua_literals_keep_strings_intact() {
    assert_eq!(
        lua_literal(&json!({"a": "x\"\\\ny", "b": [1, true], "c": null})),
        r#"{["a"] = "x\"\\\ny", ["b"] = {1, true}}"#
    );
}

#[tokio::test]
async fn argocd_health_matches_what_the_controller_reports() {
    let (client, ns) = setup("argocd").await;
    let cm = |name: &str| json!({"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\n")});
    create_flow(
        &client,
        &ns,
        "ok",
        json!({"serviceAccountName": "flow", "steps": [cm("ok")]}),
    )
    .await;
    // Secrets are not in the flow identity's Role: Forbidden.
    create_flow(&client, &ns, "denied", json!({"serviceAccountName": "flow", "steps": [
        {"type": "apply", "manifests": format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: s, namespace: {ns}}}\n")}
    ]})).await;
    // Nested step lists are not checked by the CRD schema; the compiler finds the typo.
    create_flow(
        &client,
        &ns,
        "typo",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "retry", "attempts": 2, "steps": [{"type": "slep", "seconds": 1}]}
        ]}),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "busy",
        json!({"serviceAccountName": "flow", "steps": [
            cm("busy"), {"type": "sleep", "seconds": 120}
        ]}),
    )
    .await;

    assert_eq!(wait_done(&client, &ns, "ok").await["phase"], "Succeeded");
    let (status, _) = health(&object(&client, &ns, "ok").await);
    assert_eq!(status, "Healthy");

    assert_eq!(wait_done(&client, &ns, "denied").await["phase"], "Failed");
    let (status, message) = health(&object(&client, &ns, "denied").await);
    assert_eq!(status, "Degraded");
    assert!(message.contains("spec.steps[0]"), "{message}");

    assert_eq!(wait_done(&client, &ns, "typo").await["phase"], "Failed");
    let (status, message) = health(&object(&client, &ns, "typo").await);
    assert_eq!(status, "Degraded");
    assert!(
        message.starts_with("InvalidSpec: ") && message.contains("spec.steps[0].steps[0].type"),
        "{message}"
    );

    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &flow_resource());
    let sleeping = |o: Option<&DynamicObject>| {
        o.is_some_and(|f| {
            f.data["status"]["phase"] == "Running"
                && f.data["status"]["steps"].as_array().is_some_and(|s| {
                    s.iter()
                        .any(|s| s["type"] == "sleep" && s["phase"] == "Running")
                })
        })
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(flows.clone(), "busy", sleeping),
    )
    .await
    .unwrap()
    .unwrap();
    let busy = object(&client, &ns, "busy").await;
    let (status, _) = health(&busy);
    assert_eq!(status, "Progressing");

    // A new generation the controller has not run yet is Progressing even after success.
    let mut stale = object(&client, &ns, "ok").await;
    stale["metadata"]["generation"] = json!(stale["metadata"]["generation"].as_i64().unwrap() + 1);
    assert_eq!(health(&stale).0, "Progressing");

    // A re-run asked for in git (ops.example.com/run) keeps the generation: Progressing from
    // the moment Argo CD applied it (before the controller saw it) until that run is done.
    let mut asked = object(&client, &ns, "ok").await;
    asked["metadata"]["annotations"] = json!({"ops.example.com/run": "again"});
    let (status, message) = health(&asked);
    assert_eq!(status, "Progressing", "{message}");
    assert!(message.contains("again"), "{message}");
    let patch = json!({"metadata": {"annotations": {"ops.example.com/run": "again"}}});
    flows
        .patch("ok", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let rerun_done = |o: Option<&DynamicObject>| {
        o.is_some_and(|f| {
            f.data["status"]["run"]["trigger"] == "again"
                && f.data["status"]["phase"] == "Succeeded"
        })
    };
    tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(flows.clone(), "ok", rerun_done),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(health(&object(&client, &ns, "ok").await).0, "Healthy");

    // A retry keeps the trigger of the run it retries: the failed re-run, retried, is still
    // the run the annotation asked for (Degraded again, not Progressing).
    let patch = json!({"metadata": {"annotations": {"ops.example.com/run": "again"}}});
    flows
        .patch("denied", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let failed = |retry: bool| {
        move |o: Option<&DynamicObject>| {
            o.is_some_and(|f| {
                let run = &f.data["status"]["run"];
                run["trigger"] == "again"
                    && run["retryOf"].is_string() == retry
                    && f.data["status"]["phase"] == "Failed"
            })
        }
    };
    tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(flows.clone(), "denied", failed(false)),
    )
    .await
    .unwrap()
    .unwrap();
    let patch = json!({"metadata": {"annotations": {"ops.example.com/retry": "1"}}});
    flows
        .patch("denied", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(flows.clone(), "denied", failed(true)),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(health(&object(&client, &ns, "denied").await).0, "Degraded");
}

/// Issue #43 item 2: flows with no run that will not start one by themselves are Healthy, from
/// the status the controller really writes for each (never Progressing forever).
#[tokio::test]
async fn argocd_health_of_flows_that_wait_for_nothing_is_healthy() {
    let (client, ns) = setup("argocd-idle").await;
    let log = json!([{"type": "log", "message": "x"}]);
    create_flow(
        &client,
        &ns,
        "library",
        json!({"serviceAccountName": "flow", "includeOnly": true, "steps": log}),
    )
    .await;
    // Yearly, on a date far from now: its first slot is months away.
    create_flow(
        &client,
        &ns,
        "nightly",
        json!({"serviceAccountName": "flow", "schedule": "0 0 1 1 *", "steps": log}),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "held",
        json!({"serviceAccountName": "flow", "suspend": true, "steps": log}),
    )
    .await;
    for (name, reason, said) in [
        ("library", "IncludeOnly", "included only"),
        ("nightly", "WaitingForSchedule", "waiting for the schedule"),
        ("held", "Suspended", "suspended"),
    ] {
        let status = common::wait_status(&client, &ns, name, 60, reason, |s| {
            s["phase"] == "Pending" && s["reason"] == reason
        })
        .await;
        assert!(status["run"].is_null(), "{name} has no run: {status:#}");
        let (health, message) = health(&object(&client, &ns, name).await);
        assert_eq!(health, "Healthy", "{name}: {message}");
        assert!(
            message.starts_with(&format!("{reason}: {said}")),
            "{name}: {message}"
        );
    }
    // Resumed, the suspended flow runs; until its run ends it is Progressing again, then Healthy.
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &flow_resource());
    flows
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap();
    assert_eq!(wait_done(&client, &ns, "held").await["phase"], "Succeeded");
    assert_eq!(health(&object(&client, &ns, "held").await).0, "Healthy");
}
