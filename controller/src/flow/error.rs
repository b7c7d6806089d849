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

/// What `OwnerReferencesPermissionEnforcement` answers when it cannot map an owner's kind
/// (k8s v1.34 `plugin/pkg/admission/gc/gc_admission.go`, inside a 403 Forbidden).
const UNMAPPED_OWNER: &str =
    "cannot set blockOwnerDeletion in this case because cannot find RESTMapping";

impl Error {
    /// Whether the API server refused a write owned with `blockOwnerDeletion` because its
    /// admission cannot map the owner's kind yet: the PseudoFlow CRD was installed after the
    /// server's RESTMapper last refreshed (every 30 s). Retried soon ([`crate::backoff`]).
    pub fn owner_kind_unmapped(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s))
            if s.code == 403 && s.message.contains(UNMAPPED_OWNER))
    }

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

    fn forbidden(message: &str) -> Error {
        Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: message.into(),
            ..Default::default()
        })))
    }

    #[test]
    fn only_the_unmapped_owner_kind_refusal_is_told_apart() {
        // As gc_admission.go and apierrors.NewForbidden word it (k8s v1.34).
        let unmapped = forbidden(
            "secrets \"f-run\" is forbidden: cannot set blockOwnerDeletion in this case because \
             cannot find RESTMapping for APIVersion ops.example.com/v1alpha1 Kind PseudoFlow: \
             no matches for kind \"PseudoFlow\" in version \"ops.example.com/v1alpha1\"",
        );
        assert!(unmapped.owner_kind_unmapped());
        // A real lack of rights stays an ordinary failure.
        let no_rights = forbidden(
            "jobs.batch \"j\" is forbidden: cannot set blockOwnerDeletion if an ownerReference \
             refers to a resource you can't set finalizers on: , <nil>",
        );
        assert!(!no_rights.owner_kind_unmapped());
        let mut other_code = forbidden(UNMAPPED_OWNER);
        if let Error::Kube(kube::Error::Api(s)) = &mut other_code {
            s.code = 500;
        }
        assert!(!other_code.owner_kind_unmapped());
        assert!(!Error::Bind(UNMAPPED_OWNER.into()).owner_kind_unmapped());
    }
}
