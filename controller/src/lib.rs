//! The PseudoFlow controller. [`walk`] is the pure heart — given a plan, what has happened so far
//! and the time, it says what to start, abort or wait for — and [`reconcile`] is the thin loop
//! around it: observe Jobs, feed results to the walker, launch what it says, write status.

pub mod metrics;
pub mod reconcile;
pub mod walk;

pub use reconcile::{run_controller, Context};
