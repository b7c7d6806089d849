//! `includeFlow`: run the steps of another PseudoFlow in place (same namespace by default).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::text::is_dns_label;

/// Runs another flow's steps here, read under this flow's ServiceAccount; a cycle across flows
/// fails the step that would close it.
///
/// As in the original DSL, the step's common `name` field names the flow to include (so it is
/// required for this type); see [`crate::Step::included_flow`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncludeFlowStep {
    /// Namespace of the included flow (default: this flow's); this flow's ServiceAccount needs
    /// `get` on pseudoflows there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Pass this flow's vars to the included steps, overriding the included flow's own; without
    /// it they see only their flow's vars.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inherit_vars: bool,
    /// `sha256:<64 hex>` of the steps the included flow must have (their JSON with keys sorted
    /// and no spaces, as `status.steps[].digest` shows it); other steps fail the run naming
    /// both digests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl StepParams for IncludeFlowStep {
    fn times_its_body(&self) -> bool {
        true
    }

    fn placement(&self, _: bool) -> Placement {
        Placement::Structure
    }

    fn plan_as() -> PlanAs {
        PlanAs::Undetermined("it runs another flow")
    }

    fn validate(&self, ctx: &mut Ctx) {
        if let Some(d) = &self.digest {
            super::include::check_digest(ctx, d);
        }
        if let Some(ns) = &self.namespace {
            if !ns.contains("${") && !is_dns_label(ns) {
                ctx.error("namespace", format!("{ns:?} is not a valid namespace"));
            }
        }
    }
}

/// Checks the included flow's name (the step's `name`).
pub fn check_flow_name(ctx: &mut Ctx, name: Option<&str>) {
    match name {
        None => ctx.error("name", "includeFlow needs name: the PseudoFlow to include"),
        Some(n) if !n.contains("${") && !crate::text::is_dns_subdomain(n) => {
            ctx.error("name", format!("{n:?} is not a valid PseudoFlow name"))
        }
        Some(_) => {}
    }
}
