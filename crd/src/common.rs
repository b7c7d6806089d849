//! Parameter shapes shared by several step types (object references, conditions, node
//! targeting), so the same field means the same thing in every step.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use crate::check::Ctx;

/// A reference to one Kubernetes object. `apiVersion` may be left out for well-known kinds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// e.g. `apps/v1`; defaults from the kind for built-in kinds (Node → v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the object, e.g. `Deployment`.
    pub kind: String,
    /// Name of the object.
    pub name: String,
    /// Defaults to the flow's namespace for namespaced kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl ObjectRef {
    /// Checks that the kind's apiVersion is known or given and that a name is given.
    pub fn validate(&self, ctx: &mut Ctx) {
        check_api_version(ctx, self.api_version.as_deref(), &self.kind);
        if self.name.is_empty() {
            ctx.error("name", "must not be empty");
        }
    }
}

/// One object by name or many by label selector (label steps).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// e.g. `apps/v1`; defaults from the kind for built-in kinds (Node → v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the object or objects, e.g. `Node`.
    pub kind: String,
    /// Name of the one object to change; give either `name` or `selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Defaults to the flow's namespace for namespaced kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Label selector: a string (`""` = all, `!key`, `key=value`, `key in (a,b)`) or
    /// `{matchLabels: {...}, matchExpressions: [{key, operator, values}]}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<crate::selector::LabelSelector>,
}

impl Target {
    /// Exactly one of `name` (not empty) and `selector`, a parseable selector, a known apiVersion.
    pub fn validate(&self, ctx: &mut Ctx) {
        check_api_version(ctx, self.api_version.as_deref(), &self.kind);
        match (&self.name, &self.selector) {
            (Some(_), Some(_)) => ctx.error("target", "give either name or selector, not both"),
            (None, None) => ctx.error("target", "give name (one object) or selector (many)"),
            (None, Some(sel)) => ctx.label_selector("target.selector", sel),
            (Some(name), None) if name.is_empty() => ctx.error("target.name", "must not be empty"),
            (Some(_), None) => {}
        }
    }
}

/// Comparison used by `if`, `when` and `waitFor: Custom`.
///
/// equals / notEquals / contains compare text; greaterThan / lessThan compare numbers or
/// quantities such as `10Gi`. A missing object or field satisfies only notEquals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum Op {
    /// The value equals the text.
    Equals,
    /// The value differs from the text (or is missing).
    NotEquals,
    /// The value contains the text.
    Contains,
    /// The value is a larger number or quantity.
    GreaterThan,
    /// The value is a smaller number or quantity.
    LessThan,
}

/// A test on one field of one object, read with the flow's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The object to read; `apiVersion` may be left out for well-known kinds.
    pub resource: ObjectRef,
    /// kubectl-style: `{.status.phase}`, `.status.phase`, `.status.conditions[?(@.type=="Ready")].status`.
    pub json_path: String,
    /// How the field at `jsonPath` is compared with `value`.
    pub op: Op,
    /// Compared as text, or numerically for greaterThan/lessThan (numbers or quantities such as `10Gi`).
    #[serde(default)]
    pub value: String,
}

impl Condition {
    /// Checks the resource and the jsonPath.
    pub fn validate(&self, ctx: &mut Ctx) {
        self.resource.validate(&mut ctx.at("condition.resource"));
        ctx.json_path("condition.jsonPath", &self.json_path);
        if matches!(self.op, Op::GreaterThan | Op::LessThan)
            && !self.value.contains("${")
            && crate::common::parse_number_or_quantity(&self.value).is_none()
        {
            ctx.error(
                "condition.value",
                format!(
                    "{:?} compares numbers or quantities, but {:?} is neither",
                    self.op, self.value
                ),
            );
        }
    }
}

/// How a node step outside `loopNodes` picks its nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum RunOn {
    /// Every matching node; fails if any fails.
    #[default]
    All,
    /// Every matching node; succeeds if at least one succeeds.
    Any,
    /// Only the first matching node by name.
    First,
}

/// Schema of a nested list of steps. OpenAPI cannot recurse, so the CRD keeps nested steps
/// opaque and the validator checks them with the same rules as top-level steps; the list's
/// length is the one bound the API server can apply to them.
pub fn nested_steps_schema(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": crate::limits::MAX_STEPS,
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
        "x-pseudoflow-steps": "list"
    })
}

/// Schema of `parallel.steps`: a list of branches, each a list of steps.
pub fn nested_branches_schema(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": crate::limits::MAX_STEPS,
        "items": {
            "type": "array",
            "maxItems": crate::limits::MAX_STEPS,
            "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
        },
        "x-pseudoflow-steps": "branches"
    })
}

/// Default apiVersion for the built-in kinds users name most, so `{kind: Node, name: x}` works.
pub fn default_api_version(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Node"
        | "Namespace"
        | "Pod"
        | "Service"
        | "ConfigMap"
        | "Secret"
        | "ServiceAccount"
        | "PersistentVolume"
        | "PersistentVolumeClaim"
        | "Endpoints"
        | "Event"
        | "LimitRange"
        | "ResourceQuota"
        | "ReplicationController" => "v1",
        "Deployment" | "DaemonSet" | "StatefulSet" | "ReplicaSet" | "ControllerRevision" => {
            "apps/v1"
        }
        "Job" | "CronJob" => "batch/v1",
        "Ingress" | "NetworkPolicy" | "IngressClass" => "networking.k8s.io/v1",
        "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding" => {
            "rbac.authorization.k8s.io/v1"
        }
        "CustomResourceDefinition" => "apiextensions.k8s.io/v1",
        "StorageClass" => "storage.k8s.io/v1",
        "PodDisruptionBudget" => "policy/v1",
        "HorizontalPodAutoscaler" => "autoscaling/v2",
        "Lease" => "coordination.k8s.io/v1",
        "PriorityClass" => "scheduling.k8s.io/v1",
        "PseudoFlow" => "ops.example.com/v1alpha1",
        _ => return None,
    })
}

fn check_api_version(ctx: &mut Ctx, api_version: Option<&str>, kind: &str) {
    if api_version.is_none() && default_api_version(kind).is_none() && !kind.contains("${") {
        ctx.error(
            "apiVersion",
            format!("kind {kind:?} is not a built-in kind: give its apiVersion"),
        );
    }
}

/// Parses a plain number or a Kubernetes quantity (`10Gi`, `500m`, `1e3`) into an f64, so
/// `greaterThan` can compare `10Gi` with `2048Mi`.
pub fn parse_number_or_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    if let Ok(n) = s.parse::<f64>() {
        return n.is_finite().then_some(n);
    }
    const SUFFIXES: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (suffix, factor) in SUFFIXES {
        if let Some(num) = s.strip_suffix(suffix) {
            if num.is_empty() || num.ends_with(['e', 'E']) {
                continue;
            }
            return num
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .map(|n| n * factor);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_compare_across_units() {
        assert_eq!(parse_number_or_quantity("10Gi"), Some(10.0 * 1073741824.0));
        assert!(parse_number_or_quantity("10Gi") > parse_number_or_quantity("2048Mi"));
        assert_eq!(parse_number_or_quantity("500m"), Some(0.5));
        assert_eq!(parse_number_or_quantity("42"), Some(42.0));
        assert_eq!(parse_number_or_quantity("1.5k"), Some(1500.0));
    }

    #[test]
    fn non_numbers_are_rejected() {
        assert_eq!(parse_number_or_quantity("ten"), None);
        assert_eq!(parse_number_or_quantity("Gi"), None);
        assert_eq!(parse_number_or_quantity(""), None);
        assert_eq!(parse_number_or_quantity("NaN"), None);
    }
}
