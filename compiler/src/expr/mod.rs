//! `${...}` substitution (rules in `docs/expressions.md`): [`scan`] finds expressions,
//! [`Engine`] evaluates them with minijinja — single pass, no I/O, bounded work.

mod engine;
mod scan;

pub use engine::{
    Engine, ExprRef, Scope, SubstError, Warning, FUEL, MAX_EXPRESSION_BYTES, MAX_RESULT_BYTES,
};
pub use scan::{has_expressions, scan, ScanError, Segment};

#[cfg(test)]
mod tests;
