//! A real Kubernetes control plane on loopback for e2e tests and the demo: etcd,
//! kube-apiserver, kube-controller-manager and kube-scheduler built from upstream sources
//! (`testenv/build-k8s.sh`), plus simulated kubelets ("process kubelet") that register Nodes and
//! run pods bound to them — mapped images as local processes under the pod's ServiceAccount
//! token, declared stand-ins ([`standins`]) as sleeping processes, any other image failing to
//! pull (`ErrImagePull`) — and, on request, real nodes
//! ([`real_node`]: kubelet, containerd, runc, CNI and kube-proxy in their own namespaces).
#![warn(missing_docs)]

pub mod apply;
pub mod argocd;
pub mod binaries;
pub mod certs;
pub mod controlplane;
pub mod env;
pub mod kubelet;
mod leftovers;
pub mod procs;
pub mod real_node;
pub mod seed;
pub mod standins;

pub use env::{shared, shared_with, NodeSpec, Options, TestEnv};
pub use kubelet::ImageMap;

/// Image that runs `/bin/sh` (with the pod's command) as a local process.
pub const SHELL_IMAGE: &str = "testenv/shell";
/// Image that runs the `testenv-probe` helper binary (an API call as the pod's ServiceAccount).
pub const PROBE_IMAGE: &str = "testenv/probe";

/// 32 hex digits derived from `seed` (FNV-1a, twice): ids that differ per seed.
pub(crate) fn names_digest(seed: &str) -> String {
    let fnv = |salt: u64| {
        seed.bytes().fold(0xcbf2_9ce4_8422_2325 ^ salt, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    format!("{:016x}{:016x}", fnv(0), fnv(0x9e37_79b9_7f4a_7c15))
}
