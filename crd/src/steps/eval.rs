//! `eval`: compute a value from variables with a safe expression (string and JSON
//! transformations only) and store it; runs in the controller, no pod, no I/O.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;

/// Evaluates `expression` (inside it, `${name}` means the variable `name`) into `var`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvalStep {
    /// Expression to evaluate: string and JSON transformations only (see expressions.md).
    pub expression: String,
    /// Variable that receives the result.
    pub var: String,
}

impl StepParams for EvalStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Controller
    }

    fn plan_as() -> PlanAs {
        PlanAs::NoChange
    }

    fn validate(&self, ctx: &mut Ctx) {
        if self.expression.trim().is_empty() {
            ctx.error("expression", "must not be empty");
        }
        ctx.var_name("var", &self.var);
    }

    fn outputs(&self) -> Vec<&str> {
        vec![&self.var]
    }

    fn unsubstituted_fields(&self) -> &'static [&'static str] {
        &["expression"]
    }
}
