//! Attacks on secrets (see main.rs).
