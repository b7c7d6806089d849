//! Attacks on decoding (see main.rs).
