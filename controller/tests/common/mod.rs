//! The shared helpers under the name the top-level test binaries (`argocd.rs`,
//! `argocd_health.rs`) use: every helper lives in the `pseudoflow-test-support` crate, this
//! module only re-exports it (docs/architecture.md, "House rules the tests hold").

pub use pseudoflow_test_support::*;
