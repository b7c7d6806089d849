//! What the controller decides about a flow while it runs, as pure functions: steps that
//! `include`/`includeFlow` fetched become part of the plan ([`includes`]), controller-local nodes
//! are evaluated without a pod ([`local`]), and JSON read back from the API is bounded in depth
//! ([`depth`]). The controller does the I/O around them.

pub mod depth;
pub mod includes;
pub mod local;

/// Deepest JSON nesting read from a flow's `spec` (or `status`). serde_json refuses documents
/// nested deeper than 128 while decoding, so a deeper spec is refused before it is parsed.
pub const MAX_SPEC_DEPTH: usize = 64;

/// Most nodes a plan may grow to at run time through `include`/`includeFlow`.
pub const MAX_PLAN_NODES: usize = 10_000;

/// Most `include`/`includeFlow` steps nested inside one another: each adds a level of step
/// nesting, which the compiler bounds at [`crate::limits::MAX_STEP_DEPTH`] (the outermost include
/// is itself a step at depth 1).
pub const MAX_INCLUDE_DEPTH: usize = crate::limits::MAX_STEP_DEPTH - 1;
