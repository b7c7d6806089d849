//! `kubectl-pf` end to end: the built binary against a real API server from testenv, with an
//! in-process controller running the flows (tests in this binary share one cluster, each in its
//! own namespace). One module per verb, named as the plugin's own module for it (`cli/src/`):
//! `list` and `get [-w]` ([`get`]), `get` of a bound flow ([`bound`]), `logs` ([`logs`]),
//! `plan` ([`plan`]), `suspend` and `resume` ([`suspend`]), `approve` and `reject`
//! ([`approve`]), `retry` ([`retry`]), `run` and `stop` ([`runs`]), `rollout` of a bound flow
//! ([`rollout`]), `--help`, `completion` and
//! kubectl's plugin completion ([`complete`]); what they share (the cluster, a namespace, the
//! controller, running the plugin) is in [`support`].

mod approve;
mod bound;
mod complete;
mod get;
mod logs;
mod plan;
mod retry;
mod rollout;
mod runs;
mod support;
mod suspend;
