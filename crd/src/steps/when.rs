//! `when`: the condition of `if`, guarding only the next step in the same list.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::Condition;

/// Runs the following step only if `condition` holds; otherwise that step is Skipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WhenStep {
    /// Test on one field of one object (read with the flow's identity) that lets the next step run.
    pub condition: Condition,
}

impl StepParams for WhenStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Structure
    }

    fn plan_as() -> PlanAs {
        PlanAs::GuardsNext
    }

    fn validate(&self, ctx: &mut Ctx) {
        self.condition.validate(ctx);
    }
}
