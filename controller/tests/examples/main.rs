//! The repository's example flows run as written on testenv, a module per example: the seed's
//! cluster scenarios ([`nodelocaldns_and_apiserver_vip`]), its §10 labels flow
//! ([`labels_from_exec`]) and the kopf operators of `examples/kopf/` ([`kopf`]). No test here
//! restarts a kubelet or labels a node `zone` other than through these flows: the scenarios
//! count every kubelet restart, the labels flow every `zone`.

use pseudoflow_test_support as common;

mod kopf;
mod labels_from_exec;
mod nodelocaldns_and_apiserver_vip;
