//! Where the control-plane binaries are: built by `testenv/build-k8s.sh` into the cache.

use std::path::PathBuf;

use anyhow::{bail, Result};

/// Kubernetes version the binaries are built from (matches k8s-openapi's `v1_34`).
pub const K8S_VERSION: &str = "v1.34.4";

/// Directory holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PSEUDOFLOW_K8S_BIN") {
        return dir.into();
    }
    cache_dir().join(format!("k8s-{K8S_VERSION}")).join("bin")
}

/// `~/.cache/pseudoflow` (or under `$XDG_CACHE_HOME`): where the build scripts put what they
/// build (the Kubernetes binaries, Argo CD, the images).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
        })
        .join("pseudoflow")
}

/// Path of one binary, or a clear error saying how to build it.
pub fn binary(name: &str) -> Result<PathBuf> {
    let p = bin_dir().join(name);
    if !p.is_file() {
        bail!("{} not found: run `make k8s` (testenv/build-k8s.sh) to build the Kubernetes {K8S_VERSION} binaries", p.display());
    }
    Ok(p)
}
