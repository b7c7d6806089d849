//! Work the controller does itself, with no pod: `log` (an Event), `eval`, `template` into a
//! variable, evaluating a `loop`'s items. Pure: the controller publishes the Event, sets the
//! variable and reports the completion to its walker.

use pseudoflow_crd::steps::r#loop::MAX_LOOP_ITEMS;
use pseudoflow_crd::StepKind;
use serde_json::Value;

use pseudoflow_compiler::expr::{Engine, Scope};
use pseudoflow_compiler::plan::{LoopOver, NodeKind, PlanNode};

/// How a controller-local node ended: what the walker is told.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalCompletion {
    /// Whether it succeeded.
    pub ok: bool,
    /// What happened (the `log` text, the count of a loop's items, or why it failed).
    pub message: String,
    /// For loop starts: the items (key, value).
    pub items: Option<Vec<(String, Value)>>,
}

/// What a controller-local node produced.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalOutcome {
    /// How it ended.
    pub completion: LocalCompletion,
    /// A variable to set.
    pub var: Option<(String, Value)>,
    /// A message to publish as an Event (for `log`).
    pub event: Option<String>,
}

fn ok(message: String) -> LocalCompletion {
    LocalCompletion {
        ok: true,
        message,
        ..Default::default()
    }
}

fn failed(message: String) -> LocalCompletion {
    LocalCompletion {
        ok: false,
        message,
        ..Default::default()
    }
}

/// Runs one controller-local node with `scope`: the controller's one registration point for
/// the step types it runs itself. (An `approval` or a `sleep` is never started here: the walker
/// waits for its decision or its time.)
pub fn run(engine: &Engine, node: &PlanNode, scope: &Scope) -> LocalOutcome {
    let step = node.step.as_ref().map(|s| &s.kind);
    match (&node.kind, step) {
        (
            NodeKind::LoopStart {
                over: LoopOver::Items(items),
                ..
            },
            _,
        ) => done(loop_items(engine, node, items, scope)),
        (_, Some(StepKind::Log(l))) => {
            match engine.substitute_str(&l.message, scope, &format!("{}.message", node.path)) {
                Ok((v, _)) => {
                    let text = match v {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    LocalOutcome {
                        event: Some(text.clone()),
                        ..done(ok(text))
                    }
                }
                Err(e) => done(failed(e.to_string())),
            }
        }
        (_, Some(StepKind::Eval(e))) => {
            let at = format!("{}.expression", node.path);
            set_var(&e.var, engine.eval_expression(&e.expression, scope, &at))
        }
        (_, Some(StepKind::Template(t))) if !t.writes_file() => {
            let at = format!("{}.template", node.path);
            let text = engine.render_template(&t.template, scope, &at);
            set_var(&t.output, text.map(Value::String))
        }
        // Every other node is not the controller's to run here: `StepParams::placement` (in
        // `crd`, the one place that decides where a type runs) put it in a Job or made it
        // structure, or it is a wait the walker keeps. A `_`, not a list of those types, so a
        // type run in a Job never touches this file (issue #45 item 1; the executor's `work`
        // stays exhaustive, item 4). `tests/registry.rs` holds the arms to the placement: it
        // fails for a controller-placed type that ends up here, and for an arm naming a type
        // the controller does not do itself.
        _ => not_here(node),
    }
}

/// A node the controller has no implementation of here fails, naming it.
fn not_here(node: &PlanNode) -> LocalOutcome {
    done(failed(format!(
        "{} ({}) has no controller-side implementation",
        node.id, node.step_type
    )))
}

/// An outcome that only completes.
fn done(completion: LocalCompletion) -> LocalOutcome {
    LocalOutcome {
        completion,
        var: None,
        event: None,
    }
}

/// Sets variable `name` to what an `eval` or `template` produced, or fails with why it could not.
fn set_var<E: std::fmt::Display>(name: &str, value: Result<Value, E>) -> LocalOutcome {
    match value {
        Ok(v) => LocalOutcome {
            completion: ok(String::new()),
            var: Some((name.to_string(), v)),
            event: None,
        },
        Err(e) => LocalOutcome {
            completion: failed(e.to_string()),
            var: None,
            event: None,
        },
    }
}

/// A `loop`'s items (`forEach`: a literal list, or an expression giving one), bounded by
/// [`MAX_LOOP_ITEMS`]: the walker starts one body instance per item.
fn loop_items(engine: &Engine, node: &PlanNode, items: &Value, scope: &Scope) -> LocalCompletion {
    let evaluated = match items {
        Value::String(s) => engine
            .substitute_str(s, scope, &format!("{}.forEach", node.path))
            .map(|(v, _)| v),
        other => Ok(other.clone()),
    };
    match evaluated {
        Ok(Value::Array(list)) if list.len() <= MAX_LOOP_ITEMS => LocalCompletion {
            ok: true,
            message: format!("{} items", list.len()),
            items: Some(
                list.into_iter()
                    .enumerate()
                    .map(|(i, v)| (i.to_string(), v))
                    .collect(),
            ),
        },
        Ok(Value::Array(list)) => failed(format!(
            "{}.forEach: {} items, more than {MAX_LOOP_ITEMS}",
            node.path,
            list.len(),
        )),
        Ok(other) => failed(format!(
            "{}.forEach: expected a list, got {}",
            node.path,
            pseudoflow_crd::schema::describe(&other)
        )),
        Err(e) => failed(e.to_string()),
    }
}
