//! What one run may grow to, checked by the walker and include expansion: spec depth, plan
//! growth, include nesting, step instances, and the length of an instance's message. The
//! controller's other bounds (`controller/src/limits.rs`) are about its own work.

/// Deepest JSON nesting read from a flow's `spec` (or `status`). serde_json refuses documents
/// nested deeper than 128 while decoding, so a deeper spec is refused before it is parsed.
pub const MAX_SPEC_DEPTH: usize = 64;

/// Most nodes a plan may grow to at run time through `include`/`includeFlow`.
pub const MAX_PLAN_NODES: usize = 10_000;

/// Most `include`/`includeFlow` steps nested inside one another: each adds a level of step
/// nesting, which the compiler bounds at [`pseudoflow_compiler::limits::MAX_STEP_DEPTH`] (the outermost include
/// is itself a step at depth 1).
pub const MAX_INCLUDE_DEPTH: usize = pseudoflow_compiler::limits::MAX_STEP_DEPTH - 1;

/// Longest message (in characters) of one step instance kept in the run state.
pub const MAX_INSTANCE_MESSAGE_CHARS: usize = 2000;

/// Most node instances (steps times loop items) one run may hold.
pub const MAX_INSTANCES: usize = 20_000;

/// `text` cut to at most `max` characters, ending in an ellipsis when cut.
pub fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max.saturating_sub(1)) {
        Some((end, _)) if text.chars().count() > max => format!("{}…", &text[..end]),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::bounded;

    #[test]
    fn a_long_text_is_cut_with_an_ellipsis_and_a_short_one_kept() {
        assert_eq!(bounded("abcdef", 4), "abc…");
        assert_eq!(bounded("abcdef", 4).chars().count(), 4);
        assert_eq!(bounded("abcd", 4), "abcd");
        assert_eq!(bounded("", 4), "");
        // Characters, not bytes: never splits one.
        assert_eq!(bounded("ééééé", 3), "éé…");
    }
}
