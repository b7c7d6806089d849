//! A real Argo CD beside a testenv cluster, as host processes: redis-server, argocd-repo-server,
//! argocd-application-controller and (optionally) argocd-server, all from the one binary
//! `testenv/build-argocd.sh` builds (`make argocd`). What GitOps e2e tests sync flows with:
//! Applications in namespace `argocd` pointing at local `file://` git repositories.
//!
//! Argo CD reaches the cluster as its own ServiceAccount ([`objects::IDENTITY`]), not as
//! testenv's admin: it may do what Argo CD's chart lets it do on resources, but holds no
//! `approve`, `impersonate`, `bind` or `escalate` verb, so Argo CD's own identity approves nothing.

mod cm;
mod objects;
mod start;

use std::path::{Path, PathBuf};
use std::process::Output;

use anyhow::{bail, Context, Result};

use crate::procs::Proc;

pub use cm::chart_cm_data;
pub use objects::IDENTITY;

/// Argo CD version `testenv/build-argocd.sh` builds (its stamp names it).
pub const ARGOCD_VERSION: &str = "v3.6.1";

/// Namespace Argo CD runs in and keeps its Applications in.
pub const NAMESPACE: &str = "argocd";

/// Directory holding the `argocd` binary and the repo-server's git wrappers
/// (`PSEUDOFLOW_ARGOCD_BIN` overrides the cache).
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PSEUDOFLOW_ARGOCD_BIN") {
        return dir.into();
    }
    crate::binaries::cache_dir()
        .join(format!("argocd-{ARGOCD_VERSION}"))
        .join("bin")
}

/// The `argocd` binary, or an error saying how to build it: a test needing Argo CD fails
/// (never passes silently) when it is missing.
pub fn binary() -> Result<PathBuf> {
    let p = bin_dir().join("argocd");
    if !p.is_file() || !bin_dir().join(".stamp").is_file() {
        bail!("{} not found: run `make argocd` (testenv/build-argocd.sh) to build Argo CD {ARGOCD_VERSION}", p.display());
    }
    Ok(p)
}

/// Argo CD's CRDs (`manifests/crds` of the module the binary was built from).
pub fn crds_dir() -> PathBuf {
    bin_dir().parent().unwrap_or(Path::new(".")).join("crds")
}

/// A running Argo CD; its processes stop when it is dropped.
pub struct ArgoCd {
    dir: PathBuf,
    procs: Vec<Proc>,
    server_port: u16,
}

impl ArgoCd {
    /// Where its logs (`<process>.log`) and data are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The names of its processes.
    pub fn processes(&self) -> Vec<&str> {
        self.procs.iter().map(|p| p.name.as_str()).collect()
    }

    /// argocd-server's plaintext gRPC/HTTP address (`127.0.0.1:port`).
    pub fn server_addr(&self) -> String {
        format!("127.0.0.1:{}", self.server_port)
    }

    /// Runs the `argocd` CLI (the binary's CLI role) against argocd-server: `args` then
    /// `--server ADDR --plaintext`, with its config under this Argo CD's directory. The output,
    /// whatever the exit status.
    pub async fn cli(&self, args: &[&str]) -> Result<Output> {
        let mut cmd = tokio::process::Command::new(binary()?);
        cmd.args(args)
            .args(["--server", &self.server_addr(), "--plaintext"])
            .env("ARGOCD_BINARY_NAME", "argocd")
            .env("ARGOCD_CONFIG_DIR", self.dir.join("cli"))
            .env("HOME", &self.dir)
            .kill_on_drop(true);
        crate::procs::own_group_and_die_with_parent(&mut cmd);
        cmd.output()
            .await
            .with_context(|| format!("running argocd {}", args.join(" ")))
    }
}
