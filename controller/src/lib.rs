//! The PseudoFlow controller. [`walk`] is the pure heart — given a plan, what has happened so far
//! and the time, it says what to start, abort or wait for — so the reconcile loop around it stays
//! thin and everything it decides can be tested without a cluster.

pub mod walk;
