//! The admission webhooks, called by testenv's real kube-apiserver: the validating webhook that
//! compiles a flow and refuses it with every path, its certificate (made, stored, rotated, or
//! cert-manager's), who may set the approval annotations ([`webhook`]); and `type: approval`
//! gates decided through both webhooks ([`approval`]). The attacks on them are in
//! `adversarial/`.

use pseudoflow_test_support as common;

mod approval;
mod stop;
mod webhook;
