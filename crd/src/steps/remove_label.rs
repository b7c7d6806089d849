//! `removeLabel`: remove label keys from one object or every object a selector matches.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, Preview, StepParams};
use crate::check::Ctx;
use crate::common::Target;
use crate::selector::Selector;

/// Removes `keys` from `target`'s labels; absent keys are not an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoveLabelStep {
    /// The object (by `name`) or objects (by `selector`) to remove the labels from.
    pub target: Target,
    /// Label keys to remove.
    pub keys: Vec<String>,
}

impl StepParams for RemoveLabelStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::Preview(Preview::RemoveLabel)
    }

    fn runs_in_controller(&self) -> bool {
        true
    }

    fn validate(&self, ctx: &mut Ctx) {
        self.target.validate(ctx);
        if self.keys.is_empty() {
            ctx.error("keys", "must name at least one label key");
        }
        for (i, k) in self.keys.iter().enumerate() {
            if !k.contains("${") {
                if let Err(e) = Selector::parse(k) {
                    ctx.error(&format!("keys[{i}]"), e.reason);
                }
            }
        }
    }
}
