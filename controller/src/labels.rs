//! The labels the controller selects by, named once: the compiler puts them on what it lowers,
//! the controller finds its Jobs and run state by them.

pub use pseudoflow_compiler::lower::{LABEL_FLOW, LABEL_RUN, MANAGED_BY};

/// Key of the standard label whose value [`MANAGED_BY`] marks every object the operator creates.
pub const MANAGED_BY_KEY: &str = "app.kubernetes.io/managed-by";

/// Label selector matching every object the operator creates (the Jobs it watches).
pub fn managed_by_selector() -> String {
    format!("{MANAGED_BY_KEY}={MANAGED_BY}")
}

/// Label selector matching the Jobs of one run.
pub fn run_selector(run_id: &str) -> String {
    format!("{LABEL_RUN}={run_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_name_the_labels_the_compiler_sets() {
        assert_eq!(
            managed_by_selector(),
            "app.kubernetes.io/managed-by=pseudoflow"
        );
        assert_eq!(run_selector("r1"), "ops.example.com/run=r1");
    }
}
