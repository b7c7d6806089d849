//! The world the seed's example flows expect, set up once for the demo and for every test that
//! runs them: the PseudoFlow CRD, the third-party CRDs their manifests use (MetalLB,
//! ServiceMonitor), the `metallb-system` namespace, the artifacts ConfigMap with the seed's
//! manifests, kubeadm-like files on every node, and an identity for flows that name none.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::Client;

use crate::apply::apply_text;
use crate::TestEnv;

/// The seed's example flows, as written (paths relative to the repository root).
pub const SEED_FLOWS: [&str; 4] = [
    "examples/nodelocaldns.yaml",
    "examples/apiserver-vip.yaml",
    "examples/labels-from-exec.yaml",
    "examples/labels-from-map.yaml",
];

/// The API server address the seeded kubeadm files point at before the API-VIP flow runs.
pub const OLD_API_SERVER: &str = "https://10.0.0.11:6443";

/// Manifests the seed flows apply through `applyFile`, served from `examples/artifacts/`.
const ARTIFACTS: [&str; 4] = [
    "nodelocaldns.yaml",
    "servicemonitor-nodelocaldns.yaml",
    "01-metallb-apiserver.yaml",
    "02-kube-apiserver-lb-svc.yaml",
];

/// Namespaces the seed flows live in; their `default` ServiceAccount is the flows' identity.
pub const SEED_NAMESPACES: [&str; 2] = ["kube-system", "default"];

/// Prepares the cluster for the seed flows. The seed flows name no ServiceAccount, so the
/// `default` accounts of [`SEED_NAMESPACES`] get cluster-admin — what an operator running these
/// chores would grant their flow identity. `repo` is the repository root.
pub async fn prepare(env: &TestEnv, client: &Client, repo: &Path) -> Result<()> {
    let read =
        |p: &str| std::fs::read_to_string(repo.join(p)).with_context(|| format!("reading {p}"));
    apply_text(client, &read("crd/pseudoflow.yaml")?, None).await?;
    apply_text(
        client,
        &read("examples/artifacts/crds/third-party-crds.yaml")?,
        None,
    )
    .await?;
    apply_text(
        client,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: metallb-system}\n",
        None,
    )
    .await?;
    for ns in SEED_NAMESPACES {
        apply_text(client, &format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: seed-flows-{ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{kind: ServiceAccount, name: default, namespace: {ns}}}]\n"), None).await?;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        "pseudoflows.ops.example.com",
        "ipaddresspools.metallb.io",
        "l2advertisements.metallb.io",
        "servicemonitors.monitoring.coreos.com",
    ] {
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(crds.clone(), crd, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("CRD {crd} not established in 30 s"))??;
    }
    let mut data = BTreeMap::new();
    for f in ARTIFACTS {
        data.insert(f.to_string(), read(&format!("examples/artifacts/{f}"))?);
    }
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "pseudoflow-artifacts", "namespace": "kube-system"},
        "data": data,
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .patch(
            "pseudoflow-artifacts",
            &PatchParams::apply("testenv-seed").force(),
            &Patch::Apply(&cm),
        )
        .await?;
    env.seed_kubeadm_files(OLD_API_SERVER)?;
    Ok(())
}

/// Applies the seed flows as written; returns each one's (namespace, name).
pub async fn apply_flows(client: &Client, repo: &Path) -> Result<Vec<(String, String)>> {
    let mut names = Vec::new();
    for f in SEED_FLOWS {
        let text = std::fs::read_to_string(repo.join(f)).with_context(|| format!("reading {f}"))?;
        apply_text(client, &text, Some("default")).await?;
        let v: serde_json::Value = serde_yaml::from_str(&text)?;
        names.push((
            v["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            v["metadata"]["name"]
                .as_str()
                .context("flow without a name")?
                .to_string(),
        ));
    }
    Ok(names)
}
