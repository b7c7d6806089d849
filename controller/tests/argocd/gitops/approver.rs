//! One-click approvals through Argo CD, set up as docs/gitops.md says ("One-click approvals,
//! knowingly"): an AppProject whose `destinationServiceAccounts` names `argocd-approver` in the
//! flows' namespace, that ServiceAccount allowed to manage and `approve` flows there, and Argo CD's
//! own ServiceAccount allowed to impersonate exactly it (and nothing else). Argo CD syncs and runs
//! actions for that project's Applications as `argocd-approver`, so the approval webhook stamps
//! its decisions with that name. Plus waiting until the webhooks answer.

use std::time::{Duration, Instant};

use kube::Client;
use pseudoflow_testenv::argocd;

use crate::common::admission::kubectl_async;

/// The ServiceAccount a one-click approvals project impersonates in the flows' namespace.
pub const APPROVER: &str = "argocd-approver";

/// The RBAC and AppProject (named `ns`) of one-click approvals for namespace `ns`; returns the
/// project's name.
pub async fn approver_project(client: &Client, ns: &str) -> String {
    let argo_ns = argocd::NAMESPACE;
    let argo_sa = argocd::IDENTITY;
    let objects = format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: {APPROVER}, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {APPROVER}, namespace: {ns}}}
rules:
  - apiGroups: [ops.example.com]
    resources: [pseudoflows]
    verbs: [get, list, watch, create, update, patch, delete, approve]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {APPROVER}, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {APPROVER}}}
subjects: [{{kind: ServiceAccount, name: {APPROVER}, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: argocd-impersonates-approver, namespace: {ns}}}
rules:
  - apiGroups: [""]
    resources: [serviceaccounts]
    resourceNames: [{APPROVER}]
    verbs: [impersonate]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: argocd-impersonates-approver, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: argocd-impersonates-approver}}
subjects: [{{kind: ServiceAccount, name: {argo_sa}, namespace: {argo_ns}}}]
---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {{name: {ns}, namespace: {argo_ns}}}
spec:
  sourceRepos: ["*"]
  destinations: [{{server: "*", namespace: {ns}}}]
  destinationServiceAccounts:
    - {{server: "*", namespace: {ns}, defaultServiceAccount: {APPROVER}}}
"#
    );
    pseudoflow_testenv::apply::apply_text(client, &objects, None)
        .await
        .unwrap();
    ns.to_string()
}

/// Waits until the approval webhooks answer for `ns`: `tenant` (edit rights, no `approve`) is
/// refused setting the approve annotation on `flow` (a probe that got through is undone).
pub async fn wait_webhooks_active(ns: &str, flow: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let args = [
        "annotate",
        "pf",
        flow,
        "-n",
        ns,
        "--overwrite",
        "--as=tenant",
    ];
    loop {
        let (ok, out) =
            kubectl_async(&[&args[..], &["ops.example.com/approve=gate"]].concat()).await;
        if !ok && out.contains("tenant may not approve") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the webhooks never answered: {ok} {out}"
        );
        if ok {
            kubectl_async(&["annotate", "pf", flow, "-n", ns, "ops.example.com/approve-"]).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
