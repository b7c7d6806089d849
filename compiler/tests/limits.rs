//! Bounded input (a bad flow must hurt only itself): durations and counts have maxima, values and steps have a bounded depth,
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
        Ok(_) => panic!(
            "compiled, but should have been refused: {:.300}",
            spec.to_string()
        ),
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
        segment: vec![],
        changed_before: false,
        run_secret: None,
    };
    let lowered = lower(&inst, &LowerOptions::default()).unwrap();
    let deadline = lowered.job.spec.unwrap().active_deadline_seconds.unwrap();
    assert!(
        deadline >= i64::from(u32::MAX),
        "the deadline must not wrap below the timeout: {deadline}"
    );
}

/// `levels` lists nested in each other around a string: the string is `levels` deeper than the
/// outer list.
fn nest(levels: usize) -> Value {
    let mut v = json!("x");
    for _ in 0..levels {
        v = Value::Array(vec![v]);
    }
    v
}

/// `{key: value, ...fields}` without `json!`, which would copy `value` recursively.
fn with(fields: Value, key: &str, value: Value) -> Value {
    let Value::Object(mut map) = fields else {
        unreachable!("fields are an object")
    };
    map.insert(key.into(), value);
    Value::Object(map)
}

/// Takes a deep value apart without recursion (dropping it as is would recurse once a level).
fn drop_deep(v: Value) {
    let mut stack = vec![v];
    while let Some(mut v) = stack.pop() {
        match &mut v {
            Value::Array(items) => stack.append(items),
            Value::Object(map) => stack.extend(std::mem::take(map).into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

fn loop_over(for_each: Value) -> Value {
    let step = json!({"type": "loop", "steps": [{"type": "log", "message": "${item}"}]});
    with(
        json!({}),
        "steps",
        Value::Array(vec![with(step, "forEach", for_each)]),
    )
}

#[test]
fn a_value_nested_deeper_than_32_levels_below_its_step_is_refused_with_its_path() {
    // forEach is level 1, so its 31 lists bring the string to level 32: allowed.
    compile(&flow(), &loop_over(nest(31))).unwrap();
    let d = errors(loop_over(nest(32)));
    let path = format!("spec.steps[0].forEach{}", "[0]".repeat(32));
    assert_error(&d, &path, "nested deeper than 32 levels");
    assert_eq!(d.0.len(), 1, "one report for one deep value: {d}");
}

#[test]
fn deep_values_are_refused_in_manifests_vars_and_nested_steps_too() {
    let deep_object = (0..40).fold(json!(1), |v, _| json!({ "a": v }));
    let spec = json!({
        "vars": {"x": deep_object.clone()},
        "steps": [{"type": "retry", "attempts": 1, "steps": [
            {"type": "apply", "manifests": deep_object}
        ]}]
    });
    let d = errors(spec);
    assert_error(
        &d,
        // `vars` is level 1 below spec, `x` level 2.
        &format!("spec.vars.x{}", ".a".repeat(31)),
        "nested deeper than 32 levels",
    );
    assert_error(
        &d,
        &format!("spec.steps[0].steps[0].manifests{}", ".a".repeat(32)),
        "nested deeper than 32 levels",
    );
}

/// The check itself must not recurse: a value 100,000 levels deep is refused on a small stack
/// (the old code overflowed the stack while reading the flow, killing the process).
#[test]
fn a_value_100_000_levels_deep_is_refused_without_recursing() {
    let worker = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let spec = loop_over(nest(100_000));
            let result = compile(&flow(), &spec).map(|_| ());
            drop_deep(spec);
            result
        })
        .unwrap();
    let d = worker.join().unwrap().unwrap_err();
    assert_error(
        &d,
        &format!("spec.steps[0].forEach{}", "[0]".repeat(32)),
        "nested deeper than 32 levels",
    );
}

/// Steps inside steps, `levels` deep in all (a top-level step is level 1).
fn nested_retries(levels: usize) -> Value {
    let mut step = json!({"type": "log", "message": "innermost"});
    for _ in 1..levels {
        let retry = json!({"type": "retry", "attempts": 1});
        step = with(retry, "steps", Value::Array(vec![step]));
    }
    with(json!({}), "steps", Value::Array(vec![step]))
}

#[test]
fn steps_nested_deeper_than_16_levels_are_refused_with_the_path_of_the_first_too_deep() {
    compile(&flow(), &nested_retries(16)).unwrap();
    let d = errors(nested_retries(17));
    let path = format!("spec.steps[0]{}", ".steps[0]".repeat(16));
    assert_error(&d, &path, "steps nested deeper than 16 levels");
}

#[test]
fn parallel_branches_count_as_one_level_of_steps() {
    let mut step = json!({"type": "log", "message": "innermost"});
    for _ in 1..17 {
        step = json!({"type": "parallel", "steps": [[step]]});
    }
    let d = errors(json!({ "steps": [step] }));
    let path = format!("spec.steps[0]{}", ".steps[0][0]".repeat(16));
    assert_error(&d, &path, "steps nested deeper than 16 levels");
}

/// 10,000 levels of steps on a small stack: refused, not a stack overflow.
#[test]
fn steps_10_000_levels_deep_are_refused_without_recursing() {
    let worker = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let spec = nested_retries(10_000);
            let result = compile(&flow(), &spec).map(|_| ());
            drop_deep(spec);
            result
        })
        .unwrap();
    let d = worker.join().unwrap().unwrap_err();
    assert_error(
        &d,
        &format!("spec.steps[0]{}", ".steps[0]".repeat(16)),
        "steps nested deeper than 16 levels",
    );
}

fn logs(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"type": "log", "message": format!("m{i}")}))
        .collect()
}

#[test]
fn a_flow_of_more_than_10_000_steps_is_refused_at_the_first_step_beyond() {
    compile(&flow(), &json!({ "steps": logs(10_000) })).unwrap();
    let d = errors(json!({ "steps": logs(10_001) }));
    assert_error(&d, "spec.steps[10000]", "more than 10000 steps");
    // Nested steps count: the retry is one, its body the other 10,000.
    let d = errors(json!({"steps": [{"type": "retry", "attempts": 1, "steps": logs(10_000)}]}));
    assert_error(&d, "spec.steps[0].steps[9999]", "more than 10000 steps");
    // onDelete steps count too.
    let d = errors(json!({ "steps": logs(9_000), "onDelete": logs(1_001) }));
    assert_error(&d, "spec.onDelete[1000]", "more than 10000 steps");
}

#[test]
fn included_steps_count_towards_the_step_limit() {
    let spec = json!({"steps": [
        {"type": "include", "source": {"configMapRef": {"name": "steps", "key": "k"}}},
        {"type": "log", "message": "after"}
    ]});
    let mut expansions = pseudoflow_compiler::Expansions::new();
    expansions.insert(
        "s0".into(),
        serde_json::from_value(Value::Array(logs(9_998))).unwrap(),
    );
    pseudoflow_compiler::compile_expanded(&flow(), &spec, &expansions).unwrap();
    expansions.insert(
        "s0".into(),
        serde_json::from_value(Value::Array(logs(9_999))).unwrap(),
    );
    let Err(d) = pseudoflow_compiler::compile_expanded(&flow(), &spec, &expansions) else {
        panic!("compiled, but should have been refused");
    };
    assert_error(&d, "spec.steps[1]", "more than 10000 steps");
}

/// Included steps are validated on their own (from depth 1), so an include 16 levels deep
/// bringing one more level is only seen when the flow is compiled with them.
#[test]
fn included_steps_count_towards_the_depth_limit() {
    let mut step =
        json!({"type": "include", "source": {"configMapRef": {"name": "steps", "key": "k"}}});
    for _ in 1..16 {
        step = json!({"type": "retry", "attempts": 1, "steps": [step]});
    }
    let spec = json!({ "steps": [step] });
    let include_id = format!("s0{}", "-s0".repeat(15));
    let mut expansions = pseudoflow_compiler::Expansions::new();
    expansions.insert(
        include_id,
        serde_json::from_value(Value::Array(logs(1))).unwrap(),
    );
    let Err(d) = pseudoflow_compiler::compile_expanded(&flow(), &spec, &expansions) else {
        panic!("compiled, but should have been refused");
    };
    let path = format!("spec.steps[0]{}.included[0]", ".steps[0]".repeat(15));
    assert_error(&d, &path, "steps nested deeper than 16 levels");
}

#[test]
fn a_loop_of_more_than_1000_literal_items_is_refused() {
    let items: Vec<usize> = (0..1_001).collect();
    let d = errors(loop_over(json!(items)));
    assert_error(&d, "spec.steps[0].forEach", "at most 1000 items");
    let items: Vec<usize> = (0..1_000).collect();
    compile(&flow(), &loop_over(json!(items))).unwrap();
}

#[test]
fn nested_literal_loops_multiply_towards_the_run_iteration_limit() {
    let items = |n: usize| json!((0..n).collect::<Vec<_>>());
    let nested = |outer: usize, inner: usize| {
        json!({"steps": [{"type": "loop", "forEach": items(outer), "steps": [
            {"type": "loop", "forEach": items(inner), "steps": [{"type": "log", "message": "${item}"}]}
        ]}]})
    };
    // 100 + 100 × 99 = 10,000 iterations: allowed; 100 + 100 × 100 is not.
    compile(&flow(), &nested(100, 99)).unwrap();
    let d = errors(nested(100, 100));
    assert_error(
        &d,
        "spec.steps[0].steps[0].forEach",
        "more than 10000 loop iterations",
    );
}
