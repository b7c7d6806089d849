//! `parallel`: run branches (each a list of steps) at the same time; `waitForAll: false`
//! continues as soon as one branch succeeds and aborts the others.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Nesting, Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::nested_branches_schema;
use crate::step::Step;

/// Forks into `steps` branches and joins them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParallelStep {
    /// The branches, each a list of steps; they run at the same time.
    #[schemars(schema_with = "nested_branches_schema")]
    pub steps: Vec<Vec<Step>>,
    /// true (default): every branch must succeed; false: the first success wins.
    #[serde(default = "default_true")]
    pub wait_for_all: bool,
}

fn default_true() -> bool {
    true
}

impl StepParams for ParallelStep {
    fn times_its_body(&self) -> bool {
        true
    }

    fn placement(&self, _: bool) -> Placement {
        Placement::Structure
    }

    fn plan_as() -> PlanAs {
        PlanAs::Nested(Nesting::Branches)
    }

    fn validate(&self, ctx: &mut Ctx) {
        if self.steps.is_empty() {
            ctx.error("steps", "needs at least one branch");
        }
    }

    fn children(&self) -> Vec<(String, &[Step])> {
        self.steps
            .iter()
            .enumerate()
            .map(|(i, b)| (format!("steps[{i}]"), b.as_slice()))
            .collect()
    }
}
