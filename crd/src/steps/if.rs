//! `if`: read one field of one object (with the flow's identity) and run `then` or `else`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Nesting, Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::{nested_steps_schema, Condition};
use crate::step::Step;

/// Branches on `condition`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IfStep {
    /// Test on one field of one object (read with the flow's identity) choosing `then` or `else`.
    pub condition: Condition,
    /// Steps run when `condition` holds.
    #[schemars(schema_with = "nested_steps_schema")]
    pub then: Vec<Step>,
    /// Steps run when `condition` does not hold.
    #[serde(default, rename = "else", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "nested_steps_schema")]
    pub else_: Option<Vec<Step>>,
}

impl StepParams for IfStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Structure
    }

    fn plan_as() -> PlanAs {
        PlanAs::Nested(Nesting::Branch)
    }

    fn validate(&self, ctx: &mut Ctx) {
        self.condition.validate(ctx);
    }

    fn children(&self) -> Vec<(String, &[Step])> {
        let mut out = vec![("then".to_string(), self.then.as_slice())];
        if let Some(e) = &self.else_ {
            out.push(("else".to_string(), e.as_slice()));
        }
        out
    }
}
