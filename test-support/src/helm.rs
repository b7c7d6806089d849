//! Rendering the Helm chart as the chart tests check or install it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// helm as `charts/install-tools.sh` installs it (`make test` runs that first).
pub fn binary() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache"));
    let helm = cache.join("pseudoflow/tools/helm");
    assert!(
        helm.is_file(),
        "{} not found: run `bash charts/install-tools.sh`",
        helm.display()
    );
    helm
}

/// `helm template RELEASE <the chart> ARGS...`, as its YAML documents (empty ones dropped).
pub fn template(release: &str, args: &[String]) -> Vec<Value> {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/pseudoflow-operator");
    let out = Command::new(binary())
        .args(["template", release])
        .arg(chart)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}
