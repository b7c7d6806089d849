//! [`Resolved`]: a kind as discovery found it. Its own leaf module, so the execution context
//! (which caches what discovery found) and the API helpers (which do the discovering) each
//! import it instead of importing each other.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::core::ApiResource;

/// A kind as the API server serves it.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Group, version, kind and plural.
    pub ar: ApiResource,
    /// True for namespaced kinds.
    pub namespaced: bool,
}

/// How long a kind found by discovery is trusted: long enough that a burst of steps asks once,
/// short enough that a CRD deleted and made again with another scope or plural is seen soon.
pub const KINDS_KEPT_FOR: Duration = Duration::from_secs(60);

/// The kinds discovery found, by `apiVersion/kind`: shared by every step of one executor pod's
/// segment, and by every step the controller runs itself, so that a burst of objects asks
/// discovery once per kind rather than once per step. Discovery answers every identity alike
/// (`system:discovery`), so sharing it tells no flow anything another could not ask; a kind not
/// found is never kept (its CRD may come).
#[derive(Default)]
pub struct Kinds {
    found: Mutex<HashMap<String, (Resolved, Instant)>>,
}

impl Kinds {
    /// The kind under `key`, if found within [`KINDS_KEPT_FOR`].
    pub fn get(&self, key: &str) -> Option<Resolved> {
        let found = self.found.lock().ok()?;
        let (r, at) = found.get(key)?;
        (at.elapsed() < KINDS_KEPT_FOR).then(|| r.clone())
    }

    /// Keeps what discovery found under `key`.
    pub fn insert(&self, key: String, r: Resolved) {
        if let Ok(mut found) = self.found.lock() {
            found.retain(|_, (_, at)| at.elapsed() < KINDS_KEPT_FOR);
            found.insert(key, (r, Instant::now()));
        }
    }

    /// Forgets every kind, so the next step asks discovery again.
    pub fn clear(&self) {
        if let Ok(mut found) = self.found.lock() {
            found.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved() -> Resolved {
        Resolved {
            ar: ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
            namespaced: true,
        }
    }

    #[test]
    fn a_kind_is_kept_until_cleared() {
        let kinds = Kinds::default();
        assert!(kinds.get("v1/Pod").is_none());
        kinds.insert("v1/Pod".into(), resolved());
        assert_eq!(kinds.get("v1/Pod").unwrap().ar.plural, "pods");
        kinds.clear();
        assert!(kinds.get("v1/Pod").is_none());
    }

    #[test]
    fn a_kind_found_too_long_ago_is_asked_again() {
        let kinds = Kinds::default();
        let old = Instant::now().checked_sub(KINDS_KEPT_FOR + Duration::from_secs(1));
        let Some(old) = old else { return };
        kinds
            .found
            .lock()
            .unwrap()
            .insert("v1/Pod".into(), (resolved(), old));
        assert!(kinds.get("v1/Pod").is_none());
    }
}
