//! Attacks on node optin (see main.rs).
