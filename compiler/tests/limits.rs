//! Bounded input (#10): durations and counts have maxima, values and steps have a bounded depth,
//! and a plan a bounded size — each refusal names the path of the field that exceeds it.

use pseudoflow_compiler::lower::{FlowRef, LowerOptions, NodeInstance};
use pseudoflow_compiler::{compile, lower, FlowId};
use pseudoflow_crd::Diagnostics;
use serde_json::{json, Value};

fn flow() -> FlowId<'static> {
    FlowId {
        name: "limits",
        namespace: Some("default"),
    }
}

fn errors(spec: Value) -> Diagnostics {
    match compile(&flow(), &spec) {
        Ok(_) => panic!("compiled, but should have been refused: {spec}"),
        Err(d) => d,
    }
}

/// Asserts one error at exactly `path` whose message contains `text`.
fn assert_error(d: &Diagnostics, path: &str, text: &str) {
    assert!(
        d.0.iter()
            .any(|e| e.path == path && e.message.contains(text)),
        "expected an error at {path} containing {text:?}, got:\n{d}"
    );
}

fn wait_for(timeout: u64) -> Value {
    json!({"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "c"},
           "condition": "Exist", "timeoutSeconds": timeout})
}

#[test]
fn a_timeout_of_u32_max_is_refused_with_its_path() {
    let d = errors(json!({"steps": [wait_for(4_294_967_295)]}));
    assert_error(&d, "spec.steps[0].timeoutSeconds", "between 1 and 604800");
}

#[test]
fn a_timeout_above_seven_days_is_refused_also_in_nested_steps() {
    let spec = json!({"steps": [{"type": "retry", "attempts": 2, "steps": [wait_for(604_801)]}]});
    let d = errors(spec);
    assert_error(&d, "spec.steps[0].steps[0].timeoutSeconds", "604800");
    // Seven days exactly is fine.
    let ok = json!({"steps": [{"type": "retry", "attempts": 2, "steps": [wait_for(604_800)]}]});
    compile(&flow(), &ok).unwrap();
}

#[test]
fn every_duration_and_count_has_a_maximum() {
    let cases = [
        (
            json!({"type": "sleep", "seconds": 86_401}),
            "spec.steps[0].seconds",
        ),
        (
            json!({"type": "retry", "attempts": 101, "steps": [{"type": "log", "message": "x"}]}),
            "spec.steps[0].attempts",
        ),
        (
            json!({"type": "retry", "attempts": 2, "backoffSeconds": 4_294_967_295u64, "steps": [{"type": "log", "message": "x"}]}),
            "spec.steps[0].backoffSeconds",
        ),
        (
            json!({"type": "loop", "forEach": [1], "maxParallel": 1_001, "steps": [{"type": "log", "message": "x"}]}),
            "spec.steps[0].maxParallel",
        ),
        (
            json!({"type": "loopNodes", "selector": "", "maxParallel": 5_001, "steps": [{"type": "execNode", "cmd": "true"}]}),
            "spec.steps[0].maxParallel",
        ),
        (
            json!({"type": "waitFor", "resource": {"kind": "ConfigMap", "name": "c"}, "condition": "Exist", "intervalSeconds": 3_601}),
            "spec.steps[0].intervalSeconds",
        ),
    ];
    for (step, path) in cases {
        let d = errors(json!({"steps": [step]}));
        assert_error(&d, path, "must be between");
    }
    let d = errors(json!({"steps": [{"type": "log", "message": "x"}],
                          "options": {"timeoutSeconds": 4_294_967_295u64}}));
    assert_error(&d, "spec.options.timeoutSeconds", "must be between");
    // Beyond u32 is a range error with its path too, not "cannot read the flow".
    let d = errors(json!({"steps": [wait_for(1 << 40)]}));
    assert_error(&d, "spec.steps[0].timeoutSeconds", "must be between");
}

/// A node whose timeout is the largest u32 (as a flow that bypassed validation could carry) is
/// lowered with a saturated deadline; `timeout + grace` overflowed (a panic in debug builds,
/// a 29 s deadline in release).
#[test]
fn lowering_the_largest_timeout_does_not_overflow() {
    let mut compiled = compile(&flow(), &json!({"steps": [wait_for(600)]})).unwrap();
    let idx = compiled.plan.index("s0").unwrap();
    compiled.plan.graph[idx].timeout_seconds = Some(u32::MAX);
    let node = &compiled.plan.graph[idx];
    let flow_ref = FlowRef {
        name: "limits".into(),
        namespace: "default".into(),
        uid: "u".into(),
        service_account: "default".into(),
    };
    let inst = NodeInstance {
        flow: &flow_ref,
        run_id: "r1",
        node,
        instance: &[],
        attempt: 1,
        step: serde_json::to_value(node.step.as_ref().unwrap()).unwrap(),
        target_node: None,
        artifacts: &[],
    };
    let lowered = lower(&inst, &LowerOptions::default()).unwrap();
    let deadline = lowered.job.spec.unwrap().active_deadline_seconds.unwrap();
    assert!(
        deadline >= i64::from(u32::MAX),
        "the deadline must not wrap below the timeout: {deadline}"
    );
}
