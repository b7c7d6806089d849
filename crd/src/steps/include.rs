//! `include`: fetch a document at run time (http(s) URL, ConfigMap key or Secret key) and either
//! apply it (Kubernetes objects) or run it in place (a list of steps).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::text::is_dns_subdomain;

/// Where an included document comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum IncludeSource {
    /// `http://` or `https://` URL.
    Url(String),
    /// A key of a ConfigMap or Secret in the flow's namespace.
    Ref(KeyRefs),
}

/// Exactly one of the two references.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRefs {
    /// A key of a ConfigMap in the flow's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<KeyRef>,
    /// A key of a Secret in the flow's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<KeyRef>,
}

/// A key in a ConfigMap or Secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRef {
    /// Name of the ConfigMap or Secret.
    pub name: String,
    /// Key whose value is the document.
    pub key: String,
}

/// How to treat the fetched document; guessed from its content when absent.
///
/// Manifests: Kubernetes objects to apply. Steps: a list of steps (or a map with `steps:`) to
/// run in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum IncludeAs {
    /// Kubernetes objects to apply.
    Manifests,
    /// Steps to run in place.
    Steps,
}

/// Includes a document: objects are applied, steps are run in place.
///
/// `${...}` in included objects is substituted inside their parsed string values; included
/// steps are substituted like any step (docs/expressions.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncludeStep {
    /// Where to fetch the document: an http(s) URL, or `configMapRef`/`secretRef` in the flow's namespace.
    pub source: IncludeSource,
    /// `manifests` (objects to apply) or `steps` (run in place); guessed from the content when absent.
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_: Option<IncludeAs>,
    /// `sha256:<64 hex>` of the steps this include must bring (their JSON with keys sorted and
    /// no spaces, as `status.steps[].digest` shows it); other steps fail the run naming both
    /// digests. Needs `as: steps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl StepParams for IncludeStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Structure
    }

    fn plan_as() -> PlanAs {
        PlanAs::Undetermined("its manifests are fetched at run time")
    }

    fn validate(&self, ctx: &mut Ctx) {
        if let Some(d) = &self.digest {
            check_digest(ctx, d);
            if self.as_ != Some(IncludeAs::Steps) {
                ctx.error("digest", "a digest pins included steps: set as: steps (manifests are applied by the fetching Job as they are)");
            }
        }
        match &self.source {
            IncludeSource::Url(url) => {
                if !(url.contains("${")
                    || url.starts_with("https://")
                    || url.starts_with("http://"))
                {
                    ctx.error("source", format!("{url:?} is not an http(s) URL; use configMapRef or secretRef for in-cluster sources"));
                }
            }
            IncludeSource::Ref(refs) => match (&refs.config_map_ref, &refs.secret_ref) {
                (Some(_), Some(_)) => {
                    ctx.error("source", "give configMapRef or secretRef, not both")
                }
                (None, None) => ctx.error("source", "give a URL, configMapRef or secretRef"),
                (Some(r), None) => check_ref(ctx, "source.configMapRef", r),
                (None, Some(r)) => check_ref(ctx, "source.secretRef", r),
            },
        }
    }

    /// Included manifests are a body; included steps are not (they are compiled, and their
    /// fields substituted, like any step's).
    fn reads_body(&self) -> bool {
        true
    }
}

/// Checks a pinned digest's form: `sha256:` and 64 lowercase hex digits.
pub fn check_digest(ctx: &mut Ctx, digest: &str) {
    let hex = digest.strip_prefix("sha256:").unwrap_or_default();
    let ok = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !ok {
        ctx.error(
            "digest",
            format!("{digest:?} is not sha256: followed by 64 lowercase hex digits"),
        );
    }
}

fn check_ref(ctx: &mut Ctx, field: &str, r: &KeyRef) {
    if !r.name.contains("${") && !is_dns_subdomain(&r.name) {
        ctx.error(
            &format!("{field}.name"),
            format!("{:?} is not a valid object name", r.name),
        );
    }
    if r.key.is_empty() {
        ctx.error(&format!("{field}.key"), "must not be empty");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    fn check(steps: Value) -> Vec<String> {
        let (_, diags) = crate::validate::validate_spec(&json!({ "steps": steps }));
        diags
            .errors()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect()
    }

    #[test]
    fn a_digest_is_sha256_hex_and_pins_steps_only() {
        let pin = format!("sha256:{}", "a".repeat(64));
        let source = json!({"configMapRef": {"name": "lib", "key": "steps"}});
        let ok = check(
            json!([{"type": "include", "source": source, "as": "steps", "digest": pin},
            {"type": "includeFlow", "name": "lib", "digest": pin}]),
        );
        assert!(ok.is_empty(), "{ok:?}");
        let errors = check(
            json!([{"type": "include", "source": source, "digest": "sha256:ABC"},
            {"type": "includeFlow", "name": "lib", "digest": "md5:x"}]),
        );
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].starts_with("spec.steps[0].digest: \"sha256:ABC\" is not sha256:"));
        assert!(errors[1].contains("set as: steps"), "{errors:?}");
        assert!(errors[2].starts_with("spec.steps[1].digest: \"md5:x\""));
    }
}
