//! Attacks on limits (see main.rs): numbers past every sane bound and values nested deep enough
//! to break what reads them. The API server refuses what the CRD can describe (top-level step
//! fields); what it cannot (nested steps, free-form values) is refused by the controller as
//! InvalidSpec with the field's path, before any Job exists.

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{json, Value};

use crate::common::*;

fn flow_object(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

fn wait_for(timeout: u64) -> Value {
    json!({"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "c"},
           "condition": "Exist", "timeoutSeconds": timeout})
}

/// The reproduced overflow: `timeoutSeconds: 4294967295` on a waitFor panicked the (debug)
/// controller while lowering its Job. The CRD's maximum now refuses it at apply time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_a_timeout_of_u32_max_naming_the_field() {
    let (client, ns) = prepare("limits-refused", json!([]), json!([])).await;
    let api = flows(&client, &ns);
    let err = api
        .create(
            &PostParams::default(),
            &flow_object("huge", json!({"steps": [wait_for(4_294_967_295)]})),
        )
        .await
        .expect_err("the API server must refuse timeoutSeconds 4294967295");
    let msg = err.to_string();
    assert!(
        msg.contains("spec.steps[0].timeoutSeconds") && msg.contains("604800"),
        "the refusal names the field and its maximum: {msg}"
    );
    // The run's own timeout and a top-level loop's maxParallel are bounded the same way.
    let err = api
        .create(
            &PostParams::default(),
            &flow_object(
                "huge-run",
                json!({"steps": [{"type": "log", "message": "x"}],
                       "options": {"timeoutSeconds": 4_294_967_295u64}}),
            ),
        )
        .await
        .expect_err("the API server must refuse options.timeoutSeconds 4294967295");
    assert!(
        err.to_string().contains("spec.options.timeoutSeconds"),
        "{err}"
    );
    // Step lists carry maxItems (nested steps are opaque to the API server otherwise).
    let steps: Vec<Value> = (0..10_001)
        .map(|i| json!({"type": "log", "message": format!("m{i}")}))
        .collect();
    let err = api
        .create(
            &PostParams::default(),
            &flow_object("many-steps", json!({ "steps": steps })),
        )
        .await
        .expect_err("the API server must refuse 10,001 steps");
    let msg = err.to_string();
    assert!(msg.contains("spec.steps") && msg.contains("10000"), "{msg}");
}

/// What the CRD cannot see (a step nested in a retry, a free-form forEach) is refused by the
/// controller with the path, and nothing runs: the old controller lowered the nested timeout
/// (and panicked on the overflow) and ran the deep loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_and_deep_values_past_the_limits_are_invalid_spec_before_any_job() {
    let (client, ns, ctl) = setup("limits-nested", json!([]), json!([])).await;
    create_flow(
        &client,
        &ns,
        "nested-timeout",
        json!({"steps": [{"type": "retry", "attempts": 2, "steps": [wait_for(4_294_967_295)]}]}),
    )
    .await;
    let mut deep = json!("x");
    for _ in 0..40 {
        deep = json!([deep]);
    }
    create_flow(
        &client,
        &ns,
        "deep-for-each",
        json!({"steps": [{"type": "loop", "forEach": deep,
                          "steps": [{"type": "log", "message": "${item}"}]}]}),
    )
    .await;

    let status = wait_done(&client, &ns, "nested-timeout", 60).await;
    assert_eq!(status["reason"], "InvalidSpec", "{status:#}");
    assert!(
        status["message"].as_str().unwrap().contains(
            "spec.steps[0].steps[0].timeoutSeconds: must be between 1 and 604800, got 4294967295"
        ),
        "{status:#}"
    );
    let status = wait_done(&client, &ns, "deep-for-each", 60).await;
    assert_eq!(status["reason"], "InvalidSpec", "{status:#}");
    let path = format!("spec.steps[0].forEach{}", "[0]".repeat(32));
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{path}: nested deeper than 32 levels")),
        "{status:#}"
    );
    let jobs = Api::<Job>::namespaced(client, &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(jobs.items.is_empty(), "nothing ran");
    ctl.abort();
}
