//! `onError`: handler for the step right before it in the same list. If that step fails, these
//! steps run and the failure counts as handled; if they fail too, the flow fails.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Nesting, Placement, PlanAs, StepParams};
use crate::common::nested_steps_schema;
use crate::step::Step;

/// Steps to run when the previous step fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OnErrorStep {
    /// Steps run if the step before this one fails; the failure then counts as handled.
    #[schemars(schema_with = "nested_steps_schema")]
    pub steps: Vec<Step>,
}

impl StepParams for OnErrorStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Structure
    }

    fn plan_as() -> PlanAs {
        PlanAs::Nested(Nesting::OnError)
    }

    fn children(&self) -> Vec<(String, &[Step])> {
        vec![("steps".into(), self.steps.as_slice())]
    }
}
