//! The admission webhooks, called by testenv's real kube-apiserver: the validating webhook that
//! compiles a flow and refuses it with every path, its certificate (made, stored, rotated, or
//! cert-manager's), who may set the approval annotations ([`webhook`]); and `type: approval`
//! gates decided through both webhooks ([`approval`]); who stops a run ([`stop`]) and who may
//! pause, resume, promote or undo a bound flow's rollout ([`rollout`]), and those actions acting
//! on a rollout of widgets through the real controller ([`rollout_undo`]). The attacks on them are in
//! `adversarial/`.

use pseudoflow_test_support as common;

mod approval;
mod rollout;
mod rollout_undo;
mod stop;
mod webhook;
