//! `${...}` expressions (rules in `docs/expressions.md`): [`scan`] finds them, [`Engine`]
//! evaluates them with minijinja — single pass, no I/O, bounded work; [`check_expressions`]
//! checks a whole flow's at compile time and [`prepare_payload`] substitutes a node's at run time.

mod budget;
mod check;
mod cost;
mod depth;
mod engine;
mod guard;
mod payload;
mod scan;
mod shell;

pub use budget::MAX_WORK_BYTES;
pub use check::check_expressions;
pub use depth::{check_depth, DepthError, MAX_DEPTH};
pub use engine::{
    Engine, ExprRef, Scope, SubstError, Warning, FUEL, MAX_EXPRESSION_BYTES, MAX_RESULT_BYTES,
};
pub use payload::{prepare_payload, substitute_flow_vars};
pub use scan::{has_expressions, scan, ScanError, Segment};
pub use shell::{is_quoted, quote as shell_quote};

#[cfg(test)]
mod tests;
