//! `uncordon`: reopen a node after maintenance — only if this flow's `cordon`/`drain` closed it.
//! A node cordoned by someone else (a person, another flow, an autoscaler) stays cordoned and
//! the step says so.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cordon::check_node_name;
use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;

/// Marks `node` schedulable again if its cordon carries this flow's mark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UncordonStep {
    /// The Node's name; inside loopNodes usually `${node}`.
    pub node: String,
}

impl StepParams for UncordonStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::OnNodes
    }

    fn validate(&self, ctx: &mut Ctx) {
        check_node_name(ctx, &self.node);
    }
}
