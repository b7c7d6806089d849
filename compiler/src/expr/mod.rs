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
