//! Attacks on hijack (see main.rs).
