//! Compile-time checks of every `${...}` in a flow (filled in with the substitution engine).

use pseudoflow_crd::{Diagnostics, PseudoFlowSpec};

/// Checks the syntax of every expression and the names they use.
pub fn check_expressions(_spec: &PseudoFlowSpec, _diags: &mut Diagnostics) {}

/// The node's step as JSON with `spec.vars` substituted where possible (for `--emit`).
pub fn substitute_flow_vars(
    node: &crate::plan::PlanNode,
    _spec: &PseudoFlowSpec,
) -> serde_json::Value {
    crate::lower::payload(node)
}
