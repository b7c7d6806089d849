//! `include` and `includeFlow` end to end on testenv: fetched steps run in place (after the
//! fetch, before the next step) under the flow's ServiceAccount, invalid fetched steps fail the
//! include with their path and run nothing, an included flow's vars are scoped to its steps, and
//! a cycle across flows is refused; a pinned include runs what it pins, and fails naming both
//! digests once its source is edited.

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::common::harness::{apply, config_map, create_flow, created, setup, step, wait_done};
use pseudoflow_walk::includes::steps_digest;

#[tokio::test]
async fn included_steps_run_in_place_under_the_flows_identity() {
    let (client, ns) = setup("include").await;
    let steps = format!(
        "- type: apply\n  manifests: |\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {{name: \"from-include-${{who}}\", namespace: {ns}}}\n- type: log\n  message: included ran for ${{who}}\n"
    );
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared-steps", "namespace": ns}, "data": {"steps.yaml": steps}})).await;
    create_flow(&client, &ns, "inc", json!({
        "serviceAccountName": "flow",
        "vars": {"who": "team-a"},
        "steps": [
            {"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: before, namespace: {ns}}}\n")},
            {"type": "include", "source": {"configMapRef": {"name": "shared-steps", "key": "steps.yaml"}}},
            {"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: after, namespace: {ns}}}\n")},
        ]
    })).await;
    let status = wait_done(&client, &ns, "inc").await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(
        step(&status, "spec.steps[1].included[0]")["phase"],
        "Succeeded"
    );
    assert_eq!(
        step(&status, "spec.steps[1].included[1]")["phase"],
        "Succeeded"
    );
    let before = config_map(&client, &ns, "before").await.expect("before");
    let included = config_map(&client, &ns, "from-include-team-a")
        .await
        .expect("the included apply ran with the flow's vars");
    let after = config_map(&client, &ns, "after").await.expect("after");
    assert!(created(&before) <= created(&included) && created(&included) <= created(&after));
    // In place: the included step's Job ran under the flow's ServiceAccount, like every step.
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels("ops.example.com/flow=inc"))
        .await
        .unwrap();
    let included_job = jobs
        .items
        .iter()
        .find(|j| {
            j.metadata.annotations.as_ref().unwrap()["ops.example.com/step-path"]
                == "spec.steps[1].included[0]"
        })
        .expect("a Job for the included apply");
    assert_eq!(crate::common::service_account(included_job), Some("flow"));
    // The log step became an Event with the substituted message.
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.message.as_deref() == Some("included ran for team-a")),
        "no Event from the included log step"
    );
}

#[tokio::test]
async fn invalid_included_steps_fail_the_include_with_their_path_and_run_nothing() {
    let (client, ns) = setup("include-bad").await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared-steps", "namespace": ns},
        "data": {"steps.yaml": "- type: log\n  message: fine\n- type: slep\n  seconds: 1\n"}})).await;
    create_flow(&client, &ns, "bad", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"type": "include", "source": {"configMapRef": {"name": "shared-steps", "key": "steps.yaml"}}},
            {"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: after, namespace: {ns}}}\n")},
        ]
    })).await;
    let status = wait_done(&client, &ns, "bad").await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("spec.steps[0].included[1]") && message.contains("\"sleep\""),
        "the failure names the fetched step's path and suggests the type: {message}"
    );
    assert!(
        status["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| !s["path"].as_str().unwrap().contains("included")),
        "no included step may run or be planned: {status:#}"
    );
    assert!(config_map(&client, &ns, "after").await.is_none());
}

#[tokio::test]
async fn include_flow_runs_the_other_flows_steps_with_scoped_vars() {
    let (client, ns) = setup("include-flow").await;
    // A library flow (includeOnly): it never runs on its own, only inside its callers.
    create_flow(&client, &ns, "lib", json!({
        "serviceAccountName": "flow",
        "includeOnly": true,
        "vars": {"what": "lib"},
        "steps": [{"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: \"made-by-${{what}}-for-${{who}}\", namespace: {ns}}}\n")}]
    })).await;
    for (flow, inherit) in [("caller-inherits", true), ("caller-isolated", false)] {
        create_flow(
            &client,
            &ns,
            flow,
            json!({
                "serviceAccountName": "flow",
                "vars": {"who": flow, "what": "caller"},
                "steps": [{"type": "includeFlow", "name": "lib", "inheritVars": inherit}]
            }),
        )
        .await;
    }
    let inherits = wait_done(&client, &ns, "caller-inherits").await;
    assert_eq!(inherits["phase"], "Succeeded", "{inherits:#}");
    assert!(
        config_map(&client, &ns, "made-by-caller-for-caller-inherits")
            .await
            .is_some(),
        "with inheritVars the caller's vars are passed in and override the included flow's defaults"
    );
    // Without inheritVars the caller's vars are not visible: `${who}` is an unknown name there.
    let isolated = wait_done(&client, &ns, "caller-isolated").await;
    assert_eq!(isolated["phase"], "Failed", "{isolated:#}");
    let failed = step(&isolated, "spec.steps[0].included[0]");
    assert!(
        failed["message"].as_str().unwrap().contains("who"),
        "{failed:#}"
    );
    // The library itself never ran, not even when asked to with the run annotation.
    crate::common::request_run(&client, &ns, "lib", "please").await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let lib = crate::common::flows(&client, &ns)
        .get("lib")
        .await
        .unwrap()
        .data["status"]
        .clone();
    assert_eq!(lib["phase"], "Pending", "{lib:#}");
    assert!(lib["run"].is_null(), "{lib:#}");
    assert!(
        lib["message"]
            .as_str()
            .unwrap()
            .starts_with("included only"),
        "{lib:#}"
    );
}

#[tokio::test]
async fn a_cycle_across_flows_is_refused_before_it_repeats() {
    let (client, ns) = setup("include-cycle").await;
    create_flow(
        &client,
        &ns,
        "ping",
        json!({"serviceAccountName": "flow", "steps": [{"type": "includeFlow", "name": "pong"}]}),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "pong",
        json!({"serviceAccountName": "flow", "steps": [{"type": "includeFlow", "name": "ping"}]}),
    )
    .await;
    let status = wait_done(&client, &ns, "ping").await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let want = format!("includeFlow cycle: {ns}/ping → {ns}/pong → {ns}/ping");
    assert!(
        status["message"].as_str().unwrap().contains(&want),
        "{status:#}"
    );
}

#[tokio::test]
async fn a_pinned_include_runs_what_it_pins_and_fails_naming_both_digests_once_edited() {
    let (client, ns) = setup("include-pinned").await;
    let lib = |message: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "reviewed", "namespace": ns},
            "data": {"steps.yaml": format!("- type: log\n  message: {message}\n")}})
    };
    apply(&client, lib("reviewed")).await;
    let pin = steps_digest(&json!([{"type": "log", "message": "reviewed"}]));
    let flow = |run: &str| {
        json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "pinned", "namespace": ns, "annotations": {"ops.example.com/run": run}},
            "spec": {"serviceAccountName": "flow", "steps": [
                {"type": "include", "as": "steps", "digest": pin,
                 "source": {"configMapRef": {"name": "reviewed", "key": "steps.yaml"}}}]}})
    };
    apply(&client, flow("1")).await;
    let status = wait_done(&client, &ns, "pinned").await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(step(&status, "spec.steps[0]")["digest"], pin, "{status:#}");
    // Whoever may update the ConfigMap edits it; the next run refuses what it now holds.
    apply(&client, lib("edited")).await;
    let first = status["run"]["id"].clone();
    apply(&client, flow("2")).await;
    let status =
        crate::common::wait_status(&client, &ns, "pinned", 90, "the next run failed", |s| {
            s["run"]["id"] != first && s["phase"] == "Failed"
        })
        .await;
    let edited = steps_digest(&json!([{"type": "log", "message": "edited"}]));
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains(&pin) && message.contains(&edited),
        "the failure names both digests: {message}"
    );
    assert!(
        status["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| !s["path"].as_str().unwrap().contains("included")),
        "no edited step ran: {status:#}"
    );
}
