//! `spec.options.executor`: what a flow (and, under it, the cluster's installer) may set on the
//! pods that run its steps — resources, scheduling (tolerations, nodeSelector, affinity,
//! priorityClassName), imagePullSecrets and extra labels and annotations. Without them a
//! cluster with tainted nodes, a ResourceQuota or a private registry could not run a step.
//!
//! What a flow author must not choose (hostNetwork, hostPID, privileged, volumes, the
//! ServiceAccount, the image) is simply not offered: an unknown field is refused with its path
//! by the structural check (`schema.rs`), and label or annotation keys that the controller's own
//! selection relies on are refused here (docs/decisions.md "Executor pod settings").

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, LocalObjectReference, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::check::Ctx;
use crate::text::{bounded_alphanumeric, is_dns_subdomain};

/// Settings of the executor pods of a flow's steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorOptions {
    /// The step container's requests and limits (default: 10m CPU and 32Mi requested, 256Mi
    /// memory limit); each key set here replaces the default's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ExecutorResources>,
    /// Taints the pods tolerate (API steps; node steps already tolerate every taint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Labels a node must have to run the flow's API steps (node steps run on their node).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Where the flow's API steps may be scheduled (node steps run on their node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// The PriorityClass of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Secrets (in the flow's namespace) to pull the images with: a private registry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Extra labels on the pods (not the controller's own: `app.kubernetes.io/managed-by`,
    /// `app.kubernetes.io/name`, `ops.example.com/...`, the Job controller's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations on the pods (not under `ops.example.com/`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Requests and limits of the step container, by resource name (`cpu`, `memory`, ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorResources {
    /// Requested amounts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
    /// Limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
}

/// Label keys the controller sets or selects by (or the Job controller does): never a flow's.
const RESERVED_KEYS: &[&str] = &[
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/name",
    "job-name",
    "controller-uid",
];

/// Key prefixes owned by the operator and by the Job controller.
const RESERVED_PREFIXES: &[&str] = &["ops.example.com/", "batch.kubernetes.io/"];

/// Why `key` may not be set by a flow, if it may not.
pub fn reserved_key(key: &str) -> Option<&'static str> {
    if RESERVED_KEYS.contains(&key) {
        return Some("the controller sets it");
    }
    let domain = key.split_once('/').map(|(d, _)| d)?;
    let owned = RESERVED_PREFIXES.iter().any(|p| {
        let base = p.trim_end_matches('/');
        domain == base || domain.ends_with(&format!(".{base}"))
    });
    owned.then_some("its prefix belongs to the controller")
}

impl ExecutorOptions {
    /// These settings (the cluster's defaults) with `flow`'s put over them: a scalar or a map
    /// key the flow sets wins; lists (tolerations, imagePullSecrets) hold both, the cluster's
    /// first.
    pub fn under(&self, flow: &ExecutorOptions) -> ExecutorOptions {
        let merged_map = |a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| {
            let mut m = a.clone();
            m.extend(b.clone());
            m
        };
        let resources = match (&self.resources, &flow.resources) {
            (Some(c), Some(f)) => {
                let mut r = c.clone();
                r.requests.extend(f.requests.clone());
                r.limits.extend(f.limits.clone());
                Some(r)
            }
            (c, f) => f.clone().or_else(|| c.clone()),
        };
        let joined = |a: &[Toleration], b: &[Toleration]| {
            let mut all = a.to_vec();
            all.extend(b.iter().filter(|t| !a.contains(t)).cloned());
            all
        };
        let mut pulls = self.image_pull_secrets.clone();
        pulls.extend(
            flow.image_pull_secrets
                .iter()
                .filter(|s| !self.image_pull_secrets.contains(s))
                .cloned(),
        );
        ExecutorOptions {
            resources,
            tolerations: joined(&self.tolerations, &flow.tolerations),
            node_selector: merged_map(&self.node_selector, &flow.node_selector),
            affinity: flow.affinity.clone().or_else(|| self.affinity.clone()),
            priority_class_name: flow
                .priority_class_name
                .clone()
                .or_else(|| self.priority_class_name.clone()),
            image_pull_secrets: pulls,
            labels: merged_map(&self.labels, &flow.labels),
            annotations: merged_map(&self.annotations, &flow.annotations),
        }
    }

    /// These defaults under a flow's settings, if it has any.
    pub fn for_flow(&self, flow: Option<&ExecutorOptions>) -> ExecutorOptions {
        flow.map_or_else(|| self.clone(), |f| self.under(f))
    }

    /// What a schema cannot say: valid names, keys and quantities, and no key of the
    /// controller's own.
    pub fn validate(&self, ctx: &mut Ctx) {
        for (key, value) in &self.labels {
            check_key(ctx, &format!("labels.{key}"), key);
            if !is_label_value(value) {
                ctx.error(
                    &format!("labels.{key}"),
                    format!("{value:?} is not a valid label value"),
                );
            }
        }
        for key in self.annotations.keys() {
            check_key(ctx, &format!("annotations.{key}"), key);
        }
        for (key, value) in &self.node_selector {
            if !is_qualified_name(key) {
                ctx.error(
                    &format!("nodeSelector.{key}"),
                    format!("{key:?} is not a valid label key"),
                );
            } else if !is_label_value(value) {
                ctx.error(
                    &format!("nodeSelector.{key}"),
                    format!("{value:?} is not a valid label value"),
                );
            }
        }
        if let Some(pc) = &self.priority_class_name {
            if !is_dns_subdomain(pc) {
                ctx.error(
                    "priorityClassName",
                    format!("{pc:?} is not a valid PriorityClass name"),
                );
            }
        }
        for (i, s) in self.image_pull_secrets.iter().enumerate() {
            if !is_dns_subdomain(&s.name) {
                ctx.error(
                    &format!("imagePullSecrets[{i}].name"),
                    format!("{:?} is not a valid Secret name", s.name),
                );
            }
        }
        if let Some(r) = &self.resources {
            for (field, map) in [
                ("resources.requests", &r.requests),
                ("resources.limits", &r.limits),
            ] {
                for (name, q) in map {
                    if !is_qualified_name(name) {
                        ctx.error(
                            &format!("{field}.{name}"),
                            format!("{name:?} is not a valid resource name"),
                        );
                    } else if !is_quantity(&q.0) {
                        ctx.error(
                            &format!("{field}.{name}"),
                            format!("{:?} is not a quantity (e.g. 100m, 64Mi, 2)", q.0),
                        );
                    }
                }
            }
        }
    }
}

fn check_key(ctx: &mut Ctx, field: &str, key: &str) {
    if !is_qualified_name(key) {
        ctx.error(field, format!("{key:?} is not a valid key ([prefix/]name)"));
    } else if let Some(why) = reserved_key(key) {
        ctx.error(field, format!("{key:?} may not be set by a flow: {why}"));
    }
}

/// Kubernetes' qualified name: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 characters (alphanumerics, `-`, `_`, `.`), alphanumeric at both ends.
fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    prefix.is_none_or(is_dns_subdomain)
        && bounded_alphanumeric(name, 63, |c| {
            c.is_ascii_alphanumeric() || b"-_.".contains(&c)
        })
}

/// A label value: empty, or a name as in [`is_qualified_name`] without a prefix.
fn is_label_value(v: &str) -> bool {
    v.is_empty()
        || bounded_alphanumeric(v, 63, |c| c.is_ascii_alphanumeric() || b"-_.".contains(&c))
}

/// Kubernetes' quantity syntax: a signed decimal number, then an optional binary (Ki..Ei),
/// decimal (n, u, m, k, M..E) or exponent (e3) suffix.
fn is_quantity(q: &str) -> bool {
    let q = q.strip_prefix(['+', '-']).unwrap_or(q);
    let digits_end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(digits_end);
    let number_ok = !number.is_empty() && number != "." && number.matches('.').count() <= 1;
    let suffix_ok = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
        .is_some_and(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit()));
    number_ok && suffix_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostics;
    use serde_json::json;

    fn errors(v: serde_json::Value) -> Vec<String> {
        let opts: ExecutorOptions = serde_json::from_value(v).unwrap();
        let mut diags = Diagnostics::default();
        opts.validate(&mut Ctx::new("spec.options.executor", &mut diags));
        diags
            .errors()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect()
    }

    #[test]
    fn keys_of_the_controller_s_own_are_refused_naming_their_path() {
        let errs = errors(json!({"labels": {
            "app.kubernetes.io/managed-by": "me", "ops.example.com/run": "x",
            "team": "a", "sub.ops.example.com/x": "y"},
            "annotations": {"ops.example.com/input-sha256": "0", "note": "free text / ok"}}));
        assert_eq!(errs.len(), 4, "{errs:#?}");
        assert!(
            errs.iter()
                .any(|e| e
                    .starts_with("spec.options.executor.labels.app.kubernetes.io/managed-by: ")),
            "{errs:#?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.options.executor.labels.ops.example.com/run: ")),
            "{errs:#?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.options.executor.labels.sub.ops.example.com/x: ")),
            "{errs:#?}"
        );
        assert!(
            errs.iter().any(|e| e
                .starts_with("spec.options.executor.annotations.ops.example.com/input-sha256: ")),
            "{errs:#?}"
        );
    }

    #[test]
    fn what_is_not_offered_is_an_unknown_field_naming_its_path() {
        let spec = json!({"steps": [{"type": "log", "message": "x"}], "options": {"executor": {
            "hostNetwork": true, "securityContext": {"privileged": true},
            "tolerations": [{"key": "k", "operator": "Exists", "hostPID": true}]}}});
        let (typed, diags) = crate::validate::validate_spec(&spec);
        assert!(typed.is_none());
        let errs: Vec<String> = diags
            .errors()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect();
        for path in ["hostNetwork", "securityContext", "tolerations[0].hostPID"] {
            let full = format!("spec.options.executor.{path}: unknown field");
            assert!(
                errs.iter().any(|e| e.starts_with(&full)),
                "{full} in {errs:#?}"
            );
        }
    }

    #[test]
    fn names_values_and_quantities_are_checked() {
        let errs = errors(json!({
            "resources": {"requests": {"cpu": "100m", "memory": "lots"}, "limits": {"memory": "1Gi", "nvidia.com/gpu": "1"}},
            "nodeSelector": {"pool": "not a value"},
            "priorityClassName": "High_Prio",
            "imagePullSecrets": [{"name": "regcred"}, {"name": "Bad Name"}]}));
        assert_eq!(
            errs,
            [
                "spec.options.executor.nodeSelector.pool: \"not a value\" is not a valid label value",
                "spec.options.executor.priorityClassName: \"High_Prio\" is not a valid PriorityClass name",
                "spec.options.executor.imagePullSecrets[1].name: \"Bad Name\" is not a valid Secret name",
                "spec.options.executor.resources.requests.memory: \"lots\" is not a quantity (e.g. 100m, 64Mi, 2)",
            ]
        );
        for ok in ["1", "0.5", "100m", "64Mi", "1e3", "+2", "1.5Gi"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "m", "1.2.3", "1Mb", "e3", "1e"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn the_flow_s_settings_go_over_the_cluster_s() {
        let cluster: ExecutorOptions = serde_json::from_value(json!({
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
            "tolerations": [{"key": "pool", "operator": "Exists"}],
            "nodeSelector": {"pool": "ops", "zone": "a"},
            "priorityClassName": "low",
            "imagePullSecrets": [{"name": "mirror"}],
            "labels": {"team": "platform"}}))
        .unwrap();
        let flow: ExecutorOptions = serde_json::from_value(json!({
            "resources": {"requests": {"cpu": "1"}},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "nodeSelector": {"zone": "b"},
            "priorityClassName": "high",
            "imagePullSecrets": [{"name": "mirror"}, {"name": "private"}],
            "labels": {"team": "db"}}))
        .unwrap();
        let m = serde_json::to_value(cluster.under(&flow)).unwrap();
        assert_eq!(
            m,
            json!({
            "resources": {"requests": {"cpu": "1", "memory": "64Mi"}},
            "tolerations": [{"key": "pool", "operator": "Exists"}, {"key": "gpu", "operator": "Exists"}],
            "nodeSelector": {"pool": "ops", "zone": "b"},
            "priorityClassName": "high",
            "imagePullSecrets": [{"name": "mirror"}, {"name": "private"}],
            "labels": {"team": "db"}})
        );
        assert_eq!(ExecutorOptions::default().under(&flow), flow);
    }
}
