//! A real Kubernetes control plane on loopback for e2e tests and the demo: etcd,
//! kube-apiserver, kube-controller-manager and kube-scheduler built from upstream sources
//! (`testenv/build-k8s.sh`), plus simulated kubelets ("process kubelet") that register Nodes and
//! run pods bound to them — mapped images as local processes under the pod's ServiceAccount
//! token, everything else just marked Running and Ready.
#![warn(missing_docs)]

pub mod apply;
pub mod binaries;
pub mod certs;
pub mod controlplane;
pub mod env;
pub mod kubelet;
mod leftovers;
pub mod procs;
pub mod real_node;
pub mod seed;

pub use env::{shared, shared_with, NodeSpec, Options, TestEnv};
pub use kubelet::ImageMap;

/// Image that runs `/bin/sh` (with the pod's command) as a local process.
pub const SHELL_IMAGE: &str = "testenv/shell";
/// Image that runs the `testenv-probe` helper binary (an API call as the pod's ServiceAccount).
pub const PROBE_IMAGE: &str = "testenv/probe";
