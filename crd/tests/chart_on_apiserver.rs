//! The Helm chart, rendered with every option on, passes a server-side dry-run apply on the real
//! API server (testenv): every object is valid for Kubernetes v1.34, CRD included. Needs `helm`
//! from `charts/install-tools.sh` (run by `make test`) and kubectl from `make k8s`.

use std::process::{Command, Stdio};

fn tool(path: std::path::PathBuf, what: &str) -> std::path::PathBuf {
    assert!(path.is_file(), "{} not found: run {what}", path.display());
    path
}

#[test]
fn rendered_chart_passes_server_side_dry_run() {
    let env = pseudoflow_testenv::shared().unwrap_or_else(|e| panic!("testenv: {e}"));
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache"));
    let helm = tool(
        cache.join("pseudoflow/tools/helm"),
        "`bash charts/install-tools.sh`",
    );
    let kubectl = tool(
        pseudoflow_testenv::binaries::bin_dir().join("kubectl"),
        "`make k8s`",
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let kc = env.kubeconfig_path();
    // The ServiceMonitor/PrometheusRule kinds need their CRDs, and the release namespace must exist.
    let status = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(kc)
        .args(["apply", "-f"])
        .arg(root.join("examples/artifacts/crds/third-party-crds.yaml"))
        .status()
        .unwrap();
    assert!(status.success());
    let _ = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(kc)
        .args(["create", "namespace", "pseudoflow-system"])
        .output();
    let established = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(kc)
        .args([
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "crd/servicemonitors.monitoring.coreos.com",
            "crd/prometheusrules.monitoring.coreos.com",
        ])
        .status()
        .unwrap();
    assert!(established.success());
    let rendered = Command::new(&helm)
        .args(["template", "pf"])
        .arg(root.join("charts/pseudoflow-operator"))
        .args([
            "--namespace",
            "pseudoflow-system",
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.dashboard.enabled=true",
            "--set",
            "executorExample.enabled=true",
            // helm template knows no cluster: say the Prometheus Operator's kinds are served
            // (the chart renders them only then).
            "--api-versions",
            "monitoring.coreos.com/v1/ServiceMonitor",
            "--api-versions",
            "monitoring.coreos.com/v1/PrometheusRule",
        ])
        .output()
        .unwrap();
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let mut apply = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(kc)
        .args(["apply", "--dry-run=server", "--server-side", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    apply
        .stdin
        .take()
        .unwrap()
        .write_all(&rendered.stdout)
        .unwrap();
    let out = apply.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "dry-run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for kind in [
        "customresourcedefinition.apiextensions.k8s.io/pseudoflows.ops.example.com",
        "deployment.apps/pf-pseudoflow",
        "clusterrole.rbac.authorization.k8s.io/pf-pseudoflow",
        "prometheusrule.monitoring.coreos.com/pf-pseudoflow",
    ] {
        assert!(stdout.contains(kind), "{kind} missing from:\n{stdout}");
    }
}
