//! Attacks on memory (see main.rs).
