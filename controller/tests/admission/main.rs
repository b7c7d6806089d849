//! The admission webhooks, called by testenv's real kube-apiserver: the validating webhook that
//! compiles a flow and refuses it with every path, its certificate (made, stored, rotated, or
//! cert-manager's), who may set the approval annotations ([`webhook`]); and `type: approval`
//! gates decided through both webhooks ([`approval`]); who stops a run ([`stop`]) and who may
//! pause, resume, promote or undo a bound flow's rollout ([`rollout`]). The attacks on them are in
//! `adversarial/`.

use pseudoflow_test_support as common;

mod approval;
mod rollout;
mod stop;
mod webhook;
