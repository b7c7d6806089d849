//! Property test of the compiler on hostile input (a bad flow must hurt only itself): generated step trees of every step type
//! with random, mutated and wrongly typed fields, huge numbers, deep nesting and random `${...}`
//! strings, and random mutations of every example flow. `compile()` must never panic, every
//! rejection must carry a path starting with `spec`, and every node of a flow that compiles must
//! lower (or refuse to) without panicking.
//!
//! `PSEUDOFLOW_FUZZ_CASES=100000 cargo test -p pseudoflow-compiler --test fuzz -- --nocapture`
//! runs more cases than the default (10,000 per property, about 15 s on 2 cores).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use pseudoflow_compiler::emit::emit_node;
use pseudoflow_compiler::lower::{task_of, FlowRef, LowerOptions};
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_crd::step_schema::step_schemas;
use pseudoflow_crd::steps::registry::STEP_TYPES;
use serde_json::{json, Map, Value};

/// Cases per property: `PSEUDOFLOW_FUZZ_CASES` or the default.
fn cases(default: u32) -> u32 {
    std::env::var("PSEUDOFLOW_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Flows that compiled, across the properties (the rest were refused).
static COMPILED: AtomicUsize = AtomicUsize::new(0);

/// Runs `check` on `cases` values of `strategy`, printing how many ran; a failure is shrunk
/// and reported with the smallest failing input.
fn run<S: Strategy>(name: &str, cases: u32, strategy: S, check: impl Fn(S::Value))
where
    S::Value: std::fmt::Debug,
{
    let count = AtomicUsize::new(0);
    let compiled_before = COMPILED.load(Ordering::Relaxed);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    });
    let result = runner.run(&strategy, |v| {
        count.fetch_add(1, Ordering::Relaxed);
        check(v);
        Ok(())
    });
    println!(
        "fuzz {name}: {} cases run, {} compiled",
        count.load(Ordering::Relaxed),
        COMPILED.load(Ordering::Relaxed) - compiled_before
    );
    if let Err(e) = result {
        panic!("fuzz {name}: {e}");
    }
}

/// The property: compile never panics, rejections name a `spec` path, and what compiles lowers.
fn compiles_or_explains(spec: &Value) {
    let id = FlowId {
        name: "fuzz",
        namespace: Some("default"),
    };
    match compile(&id, spec) {
        Ok(compiled) => {
            COMPILED.fetch_add(1, Ordering::Relaxed);
            let flow = FlowRef {
                name: "fuzz".into(),
                namespace: "default".into(),
                uid: "u".into(),
                service_account: "default".into(),
            };
            let plans = [Some(&compiled.plan), compiled.on_delete.as_ref()];
            for plan in plans.into_iter().flatten() {
                for node in plan.nodes().filter(|n| task_of(n).is_some()).take(50) {
                    let _ = emit_node(
                        &compiled,
                        &flow,
                        &node.id,
                        "node-a",
                        &LowerOptions::default(),
                    );
                }
            }
        }
        Err(diags) => {
            assert!(diags.has_errors(), "refused without an error: {diags}");
            for d in &diags.0 {
                assert!(
                    d.path == "spec" || d.path.starts_with("spec.") || d.path.starts_with("spec["),
                    "diagnostic without a spec path: {d:?}"
                );
            }
        }
    }
}

/// Every field name any step type has, so random steps hit real fields.
fn field_names() -> Vec<String> {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(load_field_names).clone()
}

fn load_field_names() -> Vec<String> {
    let mut names: Vec<String> = step_schemas()
        .values()
        .flat_map(|s| s["properties"].as_object().unwrap().keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

fn numbers() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::sample::select(vec![
            json!(0),
            json!(1),
            json!(-1),
            json!(4_294_967_295u64),
            json!(4_294_967_296u64),
            json!(604_800),
            json!(604_801),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1e300),
            json!(-0.5),
            json!(2.5),
        ]),
    ]
}

/// Strings users and attackers write: expressions, near-expressions, step type names, selectors.
fn strings() -> impl Strategy<Value = String> {
    let tricky = prop::sample::select(vec![
        "${item}",
        "${node}",
        "${index}",
        "${x}",
        "${items.split(' ')}",
        "${ range(1000000) | list }",
        // Not `'a' * 100000000`: it is refused, but only after seconds of work, which would
        // make every case that draws it slow.
        "${ 'a' * 100000 }",
        "${ 1 / 0 }",
        "${",
        "${}",
        "$${x}",
        "${{}}",
        "${ {'a': 1} }",
        "${ [1, 2, 3] }",
        "${ self }",
        "${ lipsum(1000000) }",
        "${ x | tojson }",
        "${ json('[1, [2, [3]]]') }",
        "",
        " ",
        "..",
        "/etc/../x",
        "role=worker",
        "!key",
        "key in (a,b)",
        "{.status.phase}",
        ".status.conditions[?(@.type==\"Ready\")].status",
        "(",
        "[a-",
        "Exist",
        "Custom",
        "equals",
        "greaterThan",
        "10Gi",
        "https://example.com/x",
        "ConfigMap",
        "Node",
    ])
    .prop_map(str::to_string);
    prop_oneof![
        3 => tricky,
        2 => "\\PC{0,12}",
        2 => "[a-z${}.() '|0-9]{0,16}",
        1 => prop::sample::select(STEP_TYPES.to_vec()).prop_map(str::to_string),
    ]
}

/// Any JSON value, a few levels deep.
fn values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        numbers(),
        strings().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(strings(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A list nested `depth` deep: deep values must be refused, not crash anything.
fn deep_value() -> impl Strategy<Value = Value> {
    (0usize..60, any::<bool>()).prop_map(|(depth, objects)| {
        let mut v = json!("x");
        for _ in 0..depth {
            v = if objects {
                json!({ "k": v })
            } else {
                Value::Array(vec![v])
            };
        }
        v
    })
}

/// A step of a random type with random fields; `nested` generates the step lists inside it.
fn step_with(nested: BoxedStrategy<Value>) -> impl Strategy<Value = Value> {
    let names = field_names();
    let fields = prop::collection::vec(
        (
            prop::sample::select(names),
            prop_oneof![
                4 => values(),
                1 => deep_value(),
                2 => prop::collection::vec(nested.clone(), 0..3).prop_map(Value::Array),
                1 => prop::collection::vec(
                    prop::collection::vec(nested, 0..2).prop_map(Value::Array),
                    0..3
                )
                .prop_map(Value::Array),
            ],
        ),
        0..6,
    );
    let ty = prop_oneof![
        8 => prop::sample::select(STEP_TYPES.to_vec()).prop_map(Value::from),
        1 => values(),
    ];
    (ty, fields, any::<bool>()).prop_map(|(ty, fields, typed)| {
        let mut step = Map::new();
        if typed {
            step.insert("type".into(), ty);
        }
        for (k, v) in fields {
            step.insert(k, v);
        }
        Value::Object(step)
    })
}

/// One valid step of each type (from `examples/steps/<type>.yaml`), with the fields that hold
/// nested steps: generated steps start from these so that many of them compile.
/// (Built once: proptest builds a recursive strategy again for every case.)
fn templates() -> Vec<Template> {
    static TEMPLATES: OnceLock<Vec<Template>> = OnceLock::new();
    TEMPLATES.get_or_init(load_templates).clone()
}

/// A step type, a valid step of it, and its fields holding steps (`list` or `branches`).
type Template = (&'static str, Value, Vec<(String, String)>);

fn load_templates() -> Vec<Template> {
    STEP_TYPES
        .iter()
        .map(|ty| {
            let path = common::repo().join(format!("examples/steps/{ty}.yaml"));
            let spec = common::load_one(&path).spec().clone();
            let mut all = Vec::new();
            pointers(&spec, String::new(), &mut all);
            let step = all
                .iter()
                .filter_map(|p| spec.pointer(p))
                .find(|v| v.get("type") == Some(&json!(ty)))
                .unwrap_or_else(|| panic!("examples/steps/{ty}.yaml has a {ty} step"))
                .clone();
            let nested = step_schemas()[ty]["properties"]
                .as_object()
                .unwrap()
                .iter()
                .filter_map(|(k, v)| {
                    let kind = v.get("x-pseudoflow-steps")?.as_str()?;
                    Some((k.clone(), kind.to_string()))
                })
                .collect();
            (*ty, step, nested)
        })
        .collect()
}

/// A valid step of a random type around generated children, sometimes with a few fields
/// overwritten by random values.
fn plausible_step(nested: BoxedStrategy<Value>) -> impl Strategy<Value = Value> {
    let overrides = prop::collection::vec(
        (
            prop::sample::select(field_names()),
            prop_oneof![8 => values(), 1 => deep_value()],
        ),
        1..3,
    );
    (
        prop::sample::select(templates()),
        prop::collection::vec(nested, 1..3),
        prop_oneof![3 => Just(Vec::new()), 1 => overrides],
    )
        .prop_map(|((_, mut step, nested), children, overrides)| {
            for (field, kind) in nested {
                step[field.as_str()] = match kind.as_str() {
                    "branches" => json!([children.clone()]),
                    _ => Value::Array(children.clone()),
                };
            }
            for (field, v) in overrides {
                step[field.as_str()] = v;
            }
            step
        })
}

/// Step trees a few levels deep: mostly plausible steps, some entirely random ones.
fn steps() -> BoxedStrategy<Value> {
    let leaf = json!({"type": "log", "message": "${x}"});
    Just(leaf)
        .prop_recursive(4, 40, 3, |inner| {
            prop_oneof![
                6 => plausible_step(inner.clone()),
                1 => step_with(inner),
            ]
            .boxed()
        })
        .boxed()
}

fn specs() -> impl Strategy<Value = Value> {
    let list = prop::collection::vec(steps(), 0..4).prop_map(Value::Array);
    let vars = prop::collection::btree_map("[a-z_]{1,6}", strings(), 0..4).prop_map(|m| json!(m));
    let options = (
        prop::sample::select(vec!["Allow", "Forbid", "Replace"]),
        1u32..100_000,
    )
        .prop_map(|(policy, secs)| json!({"concurrencyPolicy": policy, "timeoutSeconds": secs}));
    (
        list.clone(),
        prop::option::weighted(0.2, list),
        prop_oneof![4 => vars.prop_map(Some), 1 => prop::option::of(values())],
        prop_oneof![4 => options.prop_map(Some), 1 => prop::option::of(values())],
    )
        .prop_map(|(steps, on_delete, vars, options)| {
            let mut spec = Map::new();
            spec.insert("steps".into(), steps);
            if let Some(d) = on_delete {
                spec.insert("onDelete".into(), d);
            }
            if let Some(v) = vars {
                spec.insert("vars".into(), v);
            }
            if let Some(o) = options {
                spec.insert("options".into(), o);
            }
            Value::Object(spec)
        })
}

#[test]
fn generated_flows_compile_or_are_refused_with_a_spec_path() {
    run("generated flows", cases(10_000), specs(), |spec| {
        compiles_or_explains(&spec)
    });
}

/// One edit of a JSON tree, at the node `at` (an index into its nodes in pre-order).
#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Replace(usize, Value),
    Duplicate(usize),
    /// Copies the subtree at the first index over the node at the second.
    Graft(usize, usize),
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let one = prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        (
            any::<usize>(),
            prop_oneof![3 => values(), 1 => deep_value()]
        )
            .prop_map(|(i, v)| Mutation::Replace(i, v)),
        any::<usize>().prop_map(Mutation::Duplicate),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Graft(a, b)),
    ];
    prop::collection::vec(one, 1..5)
}

/// Pointers (`/steps/0/then`) to every node of `v`, in pre-order.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let key = k.replace('~', "~0").replace('/', "~1");
                pointers(item, format!("{at}/{key}"), out);
            }
        }
        _ => {}
    }
}

/// The parent pointer and last segment of a pointer.
fn split(pointer: &str) -> Option<(&str, String)> {
    let (parent, last) = pointer.rsplit_once('/')?;
    Some((parent, last.replace("~1", "/").replace("~0", "~")))
}

fn apply(spec: &mut Value, m: &Mutation) {
    let mut all = Vec::new();
    pointers(spec, String::new(), &mut all);
    let pick = |i: usize| all[i % all.len()].clone();
    match m {
        Mutation::Replace(i, v) => {
            if let Some(slot) = spec.pointer_mut(&pick(*i)) {
                *slot = v.clone();
            }
        }
        Mutation::Graft(from, to) => {
            if let Some(v) = spec.pointer(&pick(*from)).cloned() {
                if let Some(slot) = spec.pointer_mut(&pick(*to)) {
                    *slot = v;
                }
            }
        }
        Mutation::Delete(i) | Mutation::Duplicate(i) => {
            let target = pick(*i);
            let Some((parent, last)) = split(&target) else {
                return;
            };
            let copy = spec.pointer(&target).cloned();
            match (spec.pointer_mut(parent), copy) {
                (Some(Value::Array(items)), Some(v)) => {
                    let idx: usize = last.parse().unwrap();
                    if matches!(m, Mutation::Delete(_)) {
                        items.remove(idx);
                    } else {
                        items.insert(idx, v);
                    }
                }
                (Some(Value::Object(map)), Some(v)) => {
                    if matches!(m, Mutation::Delete(_)) {
                        map.remove(&last);
                    } else {
                        map.insert(format!("{last}2"), v);
                    }
                }
                _ => {}
            }
        }
    }
}

#[test]
fn mutated_examples_compile_or_are_refused_with_a_spec_path() {
    let mut examples: Vec<Value> = common::examples()
        .iter()
        .map(|p| common::load_one(p).spec().clone())
        .collect();
    examples.extend(
        common::yaml_files("examples/kopf")
            .iter()
            .map(|p| common::load_one(p).spec().clone()),
    );
    assert!(examples.len() >= 30, "the examples are found");
    let strategy = (prop::sample::select(examples), mutations());
    run(
        "mutated examples",
        cases(10_000),
        strategy,
        |(mut spec, edits)| {
            for m in &edits {
                apply(&mut spec, m);
            }
            compiles_or_explains(&spec);
        },
    );
}
