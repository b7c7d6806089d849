//! Steps that act on the cluster's nodes, end to end on testenv's three simulated nodes: node
//! files, templates and commands ([`node_files_and_exec`]), label selectors on nodes
//! ([`selectors`]), a rolling `loopNodes` stopping at a failed node ([`rolling_stop`]), where
//! executor pods land and what they carry ([`executor_pods`]), and the seed's NodeLocal DNS
//! removal ([`nodelocaldns_removal`]; it restarts kubelets, so it is not in `examples`, whose
//! scenario counts every kubelet restart of its cluster). Draining and cordoning have a binary
//! of their own (`node_maintenance.rs`): they would evict and hold off these tests' pods.

use pseudoflow_test_support as common;

mod executor_pods;
mod node_files_and_exec;
mod nodelocaldns_removal;
mod rolling_stop;
mod selectors;
