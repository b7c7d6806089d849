//! `${...}` expressions (rules in `docs/expressions.md`): [`scan`] finds them, [`Engine`]
//! evaluates them with minijinja — single pass, no I/O, bounded work. A crate of its own so the
//! executor can substitute run-time bodies (applyFile, deleteFile, include) with the very rules
//! the compiler checks, without linking the DAG compiler.

mod budget;
mod cost;
mod depth;
mod engine;
mod guard;
mod lines;
mod scan;
mod shell;

pub use budget::{MAX_RESULT_BYTES, MAX_WORK_BYTES};
pub use depth::{check_depth, DepthError, MAX_DEPTH};
pub use engine::{Engine, ExprRef, Scope, SubstError, Warning, FUEL, MAX_EXPRESSION_BYTES};
pub use lines::is_oneline;
pub use scan::{has_expressions, scan, ScanError, Segment};
pub use shell::{is_quoted, is_raw, quote as shell_quote};

#[cfg(test)]
mod tests;
