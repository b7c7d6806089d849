//! `setLabel`: add or overwrite labels on one object or on every object a selector matches.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, Preview, StepParams};
use crate::check::Ctx;
use crate::common::Target;
use crate::selector::Selector;

/// Sets `labels` on `target` (a merge patch: other labels are kept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetLabelStep {
    /// The object (by `name`) or objects (by `selector`) to label.
    pub target: Target,
    /// Labels to set, key to value; a label already there gets the new value.
    pub labels: BTreeMap<String, String>,
}

impl StepParams for SetLabelStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::Preview(Preview::SetLabel)
    }

    fn runs_in_controller(&self) -> bool {
        true
    }

    fn validate(&self, ctx: &mut Ctx) {
        self.target.validate(ctx);
        if self.labels.is_empty() {
            ctx.error("labels", "must set at least one label");
        }
        for (k, v) in &self.labels {
            if k.contains("${") || v.contains("${") {
                continue;
            }
            if let Err(e) = Selector::parse(&format!("{k}={v}")) {
                ctx.error(&format!("labels.{k}"), e.reason);
            }
        }
    }
}
