//! `delete`: remove one object; deleting an object that is already gone succeeds (idempotent).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, Preview, StepParams};
use crate::check::Ctx;
use crate::common::ObjectRef;

/// Deletes `target` (foreground propagation) and waits until it is gone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteStep {
    /// The object to delete; `apiVersion` may be left out for well-known kinds.
    pub target: ObjectRef,
    /// Delete it only if it is a copy this flow's `copy` made (its `ops.example.com/copied-by`
    /// names this flow); anything else is left where it is, and the step says whose it is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub only_copies: bool,
}

impl StepParams for DeleteStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::Preview(Preview::Delete)
    }

    fn runs_in_controller(&self) -> bool {
        true
    }

    fn validate(&self, ctx: &mut Ctx) {
        self.target.validate(&mut ctx.at("target"));
    }
}
