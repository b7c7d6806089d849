//! `loop`: run `steps` once per item of a list (literal, or produced by an expression such as
//! `${unlabeled.split(' ')}`), with `${item}` and `${index}` set.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Nesting, Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::nested_steps_schema;
use crate::step::Step;

/// Most items one loop may expand to, so status and the DAG stay bounded.
pub use crate::limits::MAX_LOOP_ITEMS;

/// Repeats `steps` for each item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoopStep {
    /// A list, or a string that is one `${expression}` evaluating to a list.
    #[schemars(schema_with = "for_each_schema")]
    pub for_each: Value,
    /// Steps run for each item, with `${item}` and `${index}` set.
    #[schemars(schema_with = "nested_steps_schema")]
    pub steps: Vec<Step>,
    /// How many items run at once (default 1: one after another; at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::MAX_LOOP_PARALLEL))]
    pub max_parallel: Option<u32>,
}

fn for_each_schema(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "anyOf": [{"type": "string"}, {"type": "array"}],
        "x-kubernetes-preserve-unknown-fields": true
    })
}

impl StepParams for LoopStep {
    fn times_its_body(&self) -> bool {
        true
    }

    fn placement(&self, _: bool) -> Placement {
        Placement::Structure
    }

    fn plan_as() -> PlanAs {
        PlanAs::Nested(Nesting::Items)
    }

    fn validate(&self, ctx: &mut Ctx) {
        match &self.for_each {
            Value::String(s) if !s.contains("${") => ctx.error(
                "forEach",
                format!("{s:?} is neither a list nor an expression like \"${{items.split(' ')}}\""),
            ),
            Value::Array(items) if items.len() > MAX_LOOP_ITEMS => {
                ctx.error("forEach", format!("at most {MAX_LOOP_ITEMS} items"))
            }
            _ => {}
        }
    }

    fn children(&self) -> Vec<(String, &[Step])> {
        vec![("steps".into(), self.steps.as_slice())]
    }
}
