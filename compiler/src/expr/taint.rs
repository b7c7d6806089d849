//! Which variables can carry tenant data: in a flow bound to a kind, `object` and `trigger`
//! (written by whoever may create or edit objects of the kind), every variable a step sets
//! when the step reads such data, and a loop's `item` when the loop's list reads it. Traced
//! conservatively, by the names a step reads, to a fixed point: a quoting decision or a refusal
//! never depends on what a value happens to hold (docs/decisions.md#quoted-by-default).

use std::collections::BTreeSet;

use pseudoflow_crd::validate::without_nested_steps;
use pseudoflow_crd::{PseudoFlowSpec, Step, StepKind};
use serde_json::Value;

use super::Engine;

/// The loop variables a `loop` step gives its body (tainted together when its list is).
pub const ITEM_VARS: [&str; 2] = ["item", "index"];

/// The variables of `spec` (and of the `included` step lists run with it) that can carry
/// tenant data. Empty for a flow not bound to a kind.
pub fn tainted(spec: &PseudoFlowSpec, included: &[&[Step]]) -> BTreeSet<String> {
    let mut t: BTreeSet<String> = spec.bound_vars().iter().map(|v| v.to_string()).collect();
    if t.is_empty() {
        return t;
    }
    let engine = Engine::new();
    let mut lists: Vec<&[Step]> = vec![&spec.steps];
    lists.extend(spec.on_delete.as_deref());
    lists.extend(included.iter().copied());
    loop {
        let before = t.len();
        for steps in &lists {
            pass(&engine, steps, false, &mut t);
        }
        if t.len() == before {
            return t;
        }
    }
}

/// One pass over `steps`: a step that reads a tainted name taints what it sets.
fn pass(engine: &Engine, steps: &[Step], item_tainted: bool, t: &mut BTreeSet<String>) {
    for step in steps {
        let dirty = reads_tainted(engine, step, item_tainted, t);
        if dirty {
            t.extend(step.kind.params().outputs().into_iter().map(str::to_string));
        }
        let inner = match step.kind {
            StepKind::Loop(_) => dirty,
            _ => item_tainted,
        };
        for (_, children) in step.kind.params().children() {
            pass(engine, children, inner, t);
        }
    }
}

/// Whether the step's own fields (not its nested steps) read a tainted name.
pub fn reads_tainted(
    engine: &Engine,
    step: &Step,
    item_tainted: bool,
    t: &BTreeSet<String>,
) -> bool {
    names_read(engine, step)
        .iter()
        .any(|n| t.contains(n) || (item_tainted && ITEM_VARS.contains(&n.as_str())))
}

/// Every name the step's own fields read: `${...}` in any string, a template's and an eval's
/// free names, a `fromVar`. Unparseable text reads nothing here (the checker reports it).
fn names_read(engine: &Engine, step: &Step) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let raw = without_nested_steps(&serde_json::to_value(step).unwrap_or_default());
    strings(&raw, &mut |s| {
        if let Ok(refs) = engine.check(s, "") {
            out.extend(refs.into_iter().flat_map(|r| r.names));
        }
    });
    match &step.kind {
        StepKind::Template(p) => {
            out.extend(engine.check_template(&p.template, "").unwrap_or_default())
        }
        StepKind::Eval(p) => {
            if let Ok(r) = engine.check_eval(&p.expression, "") {
                out.extend(r.names);
            }
        }
        _ => {}
    }
    out.extend(step.kind.params().input_var().map(str::to_string));
    out
}

fn strings(v: &Value, f: &mut impl FnMut(&str)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|i| strings(i, f)),
        Value::Object(map) => map.values().for_each(|i| strings(i, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(v: Value) -> PseudoFlowSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn tenant_data_flows_through_outputs_templates_and_loops() {
        let s = spec(json!({
        "bind": {"apiVersion": "example.com/v1", "kind": "Db"},
        "steps": [
            {"type": "exec", "cmd": "hostname", "var": "host"},
            {"type": "exec", "cmd": "echo ${a}", "var": "b"},
            {"type": "template", "output": "a", "template": "{{ object.spec.x }}"},
            {"type": "loop", "forEach": "${object.spec.users}", "steps": [
                {"type": "exec", "cmd": "echo ${item}", "var": "c"}]},
            {"type": "loop", "forEach": "${['x']}", "steps": [
                {"type": "exec", "cmd": "echo ${item}", "var": "d"}]},
        ]}));
        let t = tainted(&s, &[]);
        let got: Vec<&str> = t.iter().map(String::as_str).collect();
        // `b` reads `a`, set later in the list: found on the second pass.
        assert_eq!(got, ["a", "b", "c", "object", "trigger"]);
    }

    #[test]
    fn an_unbound_flow_carries_no_tenant_data() {
        let s = spec(json!({"steps": [{"type": "exec", "cmd": "hostname", "var": "h"}]}));
        assert!(tainted(&s, &[]).is_empty());
    }
}
