//! `${...}` expressions in a flow: the engine lives in `pseudoflow-expr` (re-exported here);
//! [`check_expressions`] checks a whole flow's at compile time and [`prepare_payload`]
//! substitutes a node's at run time.

mod check;
mod payload;
mod steering;
mod taint;

pub use check::{check_expressions, check_with_includes};
pub use payload::{prepare_payload, substitute_flow_vars};
pub use pseudoflow_expr::*;

/// Flow `ns/f` with `vars: {name: n1}` and these steps, compiled: what the check and payload
/// tests start from.
#[cfg(test)]
pub(crate) fn test_flow(steps: serde_json::Value) -> crate::Compiled {
    let id = crate::FlowId {
        name: "f",
        namespace: Some("ns"),
    };
    crate::compile(
        &id,
        &serde_json::json!({"vars": {"name": "n1"}, "steps": steps}),
    )
    .expect("valid flow")
}

/// A compiled flow's warnings as `path: message` lines: what the check and steering tests
/// compare.
#[cfg(test)]
pub(crate) fn test_warnings(c: &crate::Compiled) -> Vec<String> {
    c.warnings
        .warnings()
        .map(|d| format!("{}: {}", d.path, d.message))
        .collect()
}

/// Flow `id` (`spec`, whose one `include` step fetched `included`) compiled with that
/// expansion, as the controller compiles it once the include is fetched: the include's node id
/// and each diagnostic as `Severity path: message`. The flow must not compile.
#[cfg(test)]
pub(crate) fn test_included(
    id: &crate::FlowId,
    spec: &serde_json::Value,
    included: serde_json::Value,
) -> (String, Vec<String>) {
    let c = crate::compile(id, spec).unwrap();
    let node = c.plan.nodes().find(|n| n.step_type == "include").unwrap();
    let steps = crate::validate_included(&included, &node.id).unwrap();
    let expansions: crate::Expansions = [(node.id.clone(), steps)].into();
    let found = crate::compile_expanded(id, spec, &expansions)
        .unwrap_err()
        .0
        .iter()
        .map(|d| format!("{:?} {}: {}", d.severity, d.path, d.message))
        .collect();
    (node.id.clone(), found)
}
