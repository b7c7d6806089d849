//! Adversarial e2e tests on testenv: what a flow author, a tenant who can create ConfigMaps (or
//! pods) in the flow's namespace, a namespace editor, or a node user can make the controller or
//! a node do. Each test
//! names the attack it tries and asserts it fails closed. One module per attack surface.

#[path = "../common/mod.rs"]
mod common;

mod decoding;
mod hijack;
mod limits;
mod memory;
mod node_optin;
mod run_state;
mod secret_values;
mod secrets;
