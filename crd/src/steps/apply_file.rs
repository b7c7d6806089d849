//! `applyFile`: apply a manifest file from the flow's artifacts (`spec.artifacts`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, Preview, StepParams};
use crate::check::Ctx;

/// Applies the objects in the artifact file `path`.
///
/// `${...}` in the file is substituted inside its parsed string values (docs/expressions.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplyFileStep {
    /// Relative path inside the artifact source, e.g. `nodelocaldns.yaml`.
    pub path: String,
}

impl StepParams for ApplyFileStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::Preview(Preview::ApplyFile)
    }

    fn validate(&self, ctx: &mut Ctx) {
        check_artifact_path(ctx, "path", &self.path);
    }

    fn reads_body(&self) -> bool {
        true
    }
}

/// Artifact paths stay inside the artifact root: relative, no `..`, not empty.
pub fn check_artifact_path(ctx: &mut Ctx, field: &str, path: &str) {
    if path.contains("${") {
        return;
    }
    if path.trim().is_empty() {
        ctx.error(field, "must name a file");
    } else if path.starts_with('/') {
        ctx.error(
            field,
            format!("{path:?} is absolute; artifact paths are relative to spec.artifacts"),
        );
    } else if path.split('/').any(|c| c == "..") {
        ctx.error(field, format!("{path:?} escapes the artifact root"));
    }
}
