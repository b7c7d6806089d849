//! Why a reconcile failed. A failed reconcile is retried with backoff (`backoff.rs`); each cause
//! has a short [`Error::label`] so `pseudoflow_reconcile_errors_total` tells them apart.

use pseudoflow_compiler::lower::LowerError;
use pseudoflow_walk::includes::ExpandError;

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed (conflicts included: the retry starts from fresh state).
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A run's own spec, with the steps its includes fetched, no longer compiles.
    #[error("{0}")]
    Expand(#[from] ExpandError),
    /// A node the walker started cannot become a Job.
    #[error("{0}")]
    Lower(#[from] LowerError),
    /// A bound flow cannot act as its ServiceAccount (no client configuration for it).
    #[error("{0}")]
    Bind(String),
    /// The key run state is sealed with cannot be loaded or made: nothing is stored or driven.
    #[error("run-state key: {0}")]
    RunStateKey(String),
}

impl Error {
    /// The `error` label of `pseudoflow_reconcile_errors_total`: few values, none per flow.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Expand(_) => "expand",
            Error::Lower(_) => "lower",
            Error::Bind(_) => "bind",
            Error::RunStateKey(_) => "run_state_key",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_has_its_own_label_and_keeps_its_message() {
        let lower = Error::from(LowerError::NotAJob("s0".into()));
        assert_eq!(lower.label(), "lower");
        assert_eq!(
            lower.to_string(),
            "node s0 runs in the controller, not in a Job"
        );
        let expand = Error::from(ExpandError(pseudoflow_crd::Diagnostics::default()));
        assert_eq!(expand.label(), "expand");
    }
}
