//! `patchLabel`: set different labels on different objects from one variable holding
//! `{"<object name>": {"key": "value"}}` (e.g. produced by `eval`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::Target;

/// Applies the per-object label map in variable `fromVar` to the objects `target` selects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchLabelStep {
    /// The objects to label, each with the map under its name in `fromVar`; others are left alone.
    pub target: Target,
    /// Variable holding `{"<object name>": {"key": "value"}}`; a null value removes that label.
    pub from_var: String,
}

impl StepParams for PatchLabelStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::Undetermined("its labels come from a variable set at run time")
    }

    fn runs_in_controller(&self) -> bool {
        true
    }

    fn validate(&self, ctx: &mut Ctx) {
        self.target.validate(ctx);
        let name = self.from_var.trim_start_matches("${").trim_end_matches('}');
        ctx.var_name("fromVar", name);
    }

    fn input_var(&self) -> Option<&str> {
        Some(&self.from_var)
    }
}
