//! Compile-time checks of every `${...}` in a flow (filled in with the substitution engine).

use pseudoflow_crd::{Diagnostics, PseudoFlowSpec};

/// Checks the syntax of every expression and the names they use.
pub fn check_expressions(_spec: &PseudoFlowSpec, _diags: &mut Diagnostics) {}
