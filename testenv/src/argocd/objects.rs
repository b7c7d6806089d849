//! What Argo CD expects to find in the cluster before it starts: its CRDs, namespace `argocd`
//! with its ConfigMaps and Secret (labelled `app.kubernetes.io/part-of: argocd`, as its informers
//! select them), the `default` AppProject, and its own identity: a ServiceAccount with a
//! ClusterRole of resource verbs only, and a kubeconfig with that ServiceAccount's token.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::{json, Value};

use super::NAMESPACE;

/// The ServiceAccount (in namespace `argocd`) Argo CD's processes authenticate as.
pub const IDENTITY: &str = "argocd-application-controller";

/// Applies Argo CD's CRDs from `crds` (every `*.yaml` but kustomization files).
pub(super) async fn apply_crds(client: &Client, crds: &Path) -> Result<()> {
    let mut files: Vec<_> = std::fs::read_dir(crds)
        .with_context(|| format!("reading Argo CD CRDs in {} (make argocd)", crds.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f)?;
        crate::apply::apply_text(client, &text, None)
            .await
            .with_context(|| format!("applying {}", f.display()))?;
    }
    Ok(())
}

fn part_of(kind: &str, name: &str, extra: Value) -> Value {
    let mut v = json!({
        "apiVersion": "v1", "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "labels": {"app.kubernetes.io/part-of": "argocd"}},
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    v
}

/// Namespace `argocd`, its ConfigMaps (`argocd-cm` with `cm_data`), `argocd-secret` and the
/// `default` AppProject (any repository, any destination).
pub(super) async fn apply_config(
    client: &Client,
    cm_data: &BTreeMap<String, String>,
) -> Result<()> {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    crate::apply::apply_value(client, ns, None).await?;
    let secret_key = crate::names_digest(&format!("{:?}", std::time::SystemTime::now()));
    let objects = [
        part_of("ConfigMap", "argocd-cm", json!({"data": cm_data})),
        part_of(
            "ConfigMap",
            "argocd-rbac-cm",
            json!({"data": {"policy.default": "role:admin"}}),
        ),
        part_of("ConfigMap", "argocd-cmd-params-cm", json!({})),
        part_of("ConfigMap", "argocd-gpg-keys-cm", json!({})),
        part_of("ConfigMap", "argocd-ssh-known-hosts-cm", json!({})),
        part_of("ConfigMap", "argocd-tls-certs-cm", json!({})),
        part_of(
            "Secret",
            "argocd-secret",
            json!({"stringData": {"server.secretkey": secret_key}}),
        ),
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
               "metadata": {"name": "default", "namespace": NAMESPACE},
               "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                        "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}}),
    ];
    for o in objects {
        crate::apply::apply_value(client, o, Some(NAMESPACE)).await?;
    }
    Ok(())
}

/// Argo CD's ServiceAccount and its rights: every resource verb on every resource (what Argo CD's
/// chart gives its application controller), and none of `approve`, `impersonate`, `bind`,
/// `escalate`. Returns a kubeconfig (context namespace `argocd`) with its token, written to `path`.
pub(super) async fn identity(client: &Client, admin_kubeconfig: &Path, path: &Path) -> Result<()> {
    let verbs = [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ];
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": IDENTITY, "namespace": NAMESPACE}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "testenv-argocd"},
               "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": verbs},
                         {"nonResourceURLs": ["*"], "verbs": ["get"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "testenv-argocd"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "testenv-argocd"},
               "subjects": [{"kind": "ServiceAccount", "name": IDENTITY, "namespace": NAMESPACE}]}),
    ];
    for o in objects {
        crate::apply::apply_value(client, o, None).await?;
    }
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 86400}}))?;
    let token = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create_token_request(IDENTITY, &PostParams::default(), &request)
        .await
        .context("asking a token for Argo CD's ServiceAccount")?
        .status
        .context("TokenRequest without status")?
        .token;
    write_kubeconfig(admin_kubeconfig, &token, path)
}

/// A kubeconfig for the admin kubeconfig's cluster with `token`, context namespace `argocd`.
fn write_kubeconfig(admin: &Path, token: &str, path: &Path) -> Result<()> {
    let kc: Value = serde_yaml::from_str(&std::fs::read_to_string(admin)?)?;
    let cluster = &kc["clusters"][0]["cluster"];
    let server = cluster["server"]
        .as_str()
        .context("admin kubeconfig: no server")?;
    let ca = cluster["certificate-authority"]
        .as_str()
        .context("admin kubeconfig: no certificate-authority")?;
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: argocd\n  user:\n    token: {token}\ncontexts:\n- name: argocd\n  context: {{cluster: testenv, user: argocd, namespace: {NAMESPACE}}}\ncurrent-context: argocd\n"
    );
    std::fs::write(path, text)?;
    Ok(())
}
