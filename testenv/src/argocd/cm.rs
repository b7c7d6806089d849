//! The chart's Argo CD customisations as `argocd-cm` data: exactly what `charts/argocd-cm.py`
//! prints for docs/gitops.md (the health check and the resource actions), so what testenv's
//! Argo CD runs is what a user installs.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

/// `argocd-cm`'s data from the chart in the repository at `repo` (runs `python3
/// charts/argocd-cm.py`).
pub fn chart_cm_data(repo: &Path) -> Result<BTreeMap<String, String>> {
    let script = repo.join("charts/argocd-cm.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .output()
        .with_context(|| format!("running python3 {}", script.display()))?;
    ensure!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_yaml::from_slice(&out.stdout)
        .with_context(|| format!("{} printed no YAML", script.display()))?;
    serde_json::from_value(v["data"].clone())
        .with_context(|| format!("{}: data is not a map of strings", script.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_health_check_and_actions_are_in_the_data() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let data = chart_cm_data(repo).unwrap();
        let health = &data["resource.customizations.health.ops.example.com_PseudoFlow"];
        assert!(health.contains("hs.status = \"Healthy\""), "{health}");
        let actions = &data["resource.customizations.actions.ops.example.com_PseudoFlow"];
        for a in [
            "approve",
            "reject",
            "retry",
            "retry-from-failed",
            "suspend",
            "resume",
        ] {
            assert!(
                actions.contains(&format!("- name: {a}\n")),
                "{a}: {actions}"
            );
        }
    }

    #[test]
    fn a_repository_without_the_script_is_an_error_naming_it() {
        let err = chart_cm_data(Path::new("/nonexistent")).unwrap_err();
        assert!(
            format!("{err:#}").contains("/nonexistent/charts/argocd-cm.py"),
            "{err:#}"
        );
    }
}
