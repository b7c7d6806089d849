//! How big a plan and a run may grow. The numbers are [`pseudoflow_crd::limits`] (one place, also
//! documented in `docs/steps.md`); this module adds the checks: [`compile`](crate::compile)
//! applies the static ones (steps, step depth with included steps, literal loop items and the
//! iterations of nested literal loops), and the controller calls [`check_loop_items`],
//! [`check_loop_nodes`] and [`check_run_iterations`] for what is only known at run time (items an
//! expression produced, the nodes a selector matched).

pub use pseudoflow_crd::limits::*;

/// A limit a run reached, naming the step that reached it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A `forEach` produced more items than one loop may run.
    #[error("{path}: {count} items, more than the {MAX_LOOP_ITEMS} one loop may run")]
    LoopItems {
        /// The loop step.
        path: String,
        /// How many items it was given.
        count: usize,
    },
    /// A node selector matched more nodes than one node loop may run on.
    #[error("{path}: {count} nodes, more than the {MAX_LOOP_NODES} one node loop may run on")]
    LoopNodes {
        /// The node loop (or fanned-out node step).
        path: String,
        /// How many nodes matched.
        count: usize,
    },
    /// The run as a whole would start more loop iterations than a run may.
    #[error("{path}: the run would start {count} loop iterations, more than {MAX_RUN_ITERATIONS}")]
    RunIterations {
        /// The loop that would pass the bound.
        path: String,
        /// Iterations taken so far plus this loop's.
        count: usize,
    },
}

/// Checks the items a loop at `path` (its `forEach`) is about to run.
pub fn check_loop_items(path: &str, count: usize) -> Result<(), LimitError> {
    bounded(count, MAX_LOOP_ITEMS, || LimitError::LoopItems {
        path: path.to_string(),
        count,
    })
}

/// Checks the nodes a `loopNodes` or a node step's fan-out at `path` is about to run on.
pub fn check_loop_nodes(path: &str, count: usize) -> Result<(), LimitError> {
    bounded(count, MAX_LOOP_NODES, || LimitError::LoopNodes {
        path: path.to_string(),
        count,
    })
}

/// Checks the loop iterations of a whole run (`count`: started so far plus those the loop at
/// `path` is about to start).
pub fn check_run_iterations(path: &str, count: usize) -> Result<(), LimitError> {
    bounded(count, MAX_RUN_ITERATIONS, || LimitError::RunIterations {
        path: path.to_string(),
        count,
    })
}

fn bounded(count: usize, max: usize, err: impl FnOnce() -> LimitError) -> Result<(), LimitError> {
    if count <= max {
        Ok(())
    } else {
        Err(err())
    }
}

/// The limits [`compile_with`](crate::compile::compile_with) applies to a plan's size. Only the
/// benchmark lifts them, to measure how compile time grows past them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanLimits {
    /// Most steps, nested, onDelete and included ones counted.
    pub max_steps: usize,
}

impl Default for PlanLimits {
    fn default() -> Self {
        PlanLimits {
            max_steps: MAX_STEPS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_time_checks_allow_the_limit_and_name_the_path_beyond_it() {
        assert_eq!(
            check_loop_items("spec.steps[0].forEach", MAX_LOOP_ITEMS),
            Ok(())
        );
        let e = check_loop_items("spec.steps[0].forEach", MAX_LOOP_ITEMS + 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.steps[0].forEach: 1001 items, more than the 1000 one loop may run"
        );
        assert_eq!(check_loop_nodes("spec.steps[1]", MAX_LOOP_NODES), Ok(()));
        let e = check_loop_nodes("spec.steps[1]", MAX_LOOP_NODES + 1).unwrap_err();
        assert!(
            e.to_string().starts_with("spec.steps[1]: 5001 nodes"),
            "{e}"
        );
        assert_eq!(
            check_run_iterations("spec.steps[2]", MAX_RUN_ITERATIONS),
            Ok(())
        );
        let e = check_run_iterations("spec.steps[2]", usize::MAX).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("spec.steps[2]: the run would start"),
            "{e}"
        );
    }
}
