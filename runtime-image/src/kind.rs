//! [`Resolved`]: a kind as discovery found it. Its own leaf module, so the execution context
//! (which caches what discovery found) and the API helpers (which do the discovering) each
//! import it instead of importing each other.

use kube::core::ApiResource;

/// A kind as the API server serves it.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Group, version, kind and plural.
    pub ar: ApiResource,
    /// True for namespaced kinds.
    pub namespaced: bool,
}
