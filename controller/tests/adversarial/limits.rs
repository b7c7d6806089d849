//! Attacks on limits (see main.rs).
