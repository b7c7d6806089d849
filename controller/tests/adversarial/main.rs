//! Adversarial e2e tests on testenv: what a flow author, a tenant who can create ConfigMaps (or
//! pods) in the flow's namespace, a namespace editor, a pod on the network or a node user can
//! make the controller or a node do. Each test names the attack it tries and asserts it fails
//! closed. One module per attack surface; docs/security.md's threat model names each test.

use pseudoflow_test_support as common;

mod admission_memory;
mod approvals;
mod bound_flows;
mod decoding;
mod fair_turns;
mod hijack;
mod limits;
mod memory;
mod metrics_port;
mod node_optin;
mod oversized;
mod own_kinds;
mod run_state;
mod secret_values;
mod secrets;
mod steering;
mod webhook_port;
