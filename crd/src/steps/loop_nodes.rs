//! `loopNodes`: run node steps on every node a label selector matches, `maxParallel` nodes at a
//! time (default 1: a rolling change, safest for kubelet restarts); `${node}` names the node.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, StepParams};
use crate::common::nested_steps_schema;
use crate::selector::LabelSelector;
use crate::step::Step;
use crate::validate::Ctx;

/// Runs `steps` per matching node; a failed node stops the rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoopNodesStep {
    /// `""` = every node, `key`, `!key`, `key=value`, `key in (a,b)`; or the structured form
    /// `{matchLabels: {...}, matchExpressions: [{key, operator, values}]}`.
    pub selector: LabelSelector,
    /// Steps run for each matching node, with `${node}` set to its name.
    #[schemars(schema_with = "nested_steps_schema")]
    pub steps: Vec<Step>,
    /// How many nodes change at once (default 1: a rolling change; at most 5000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::MAX_NODE_PARALLEL))]
    pub max_parallel: Option<u32>,
}

impl StepParams for LoopNodesStep {
    fn times_its_body(&self) -> bool {
        true
    }

    fn placement(&self, _: bool) -> Placement {
        Placement::Structure
    }

    fn validate(&self, ctx: &mut Ctx) {
        ctx.label_selector("selector", &self.selector);
        if ctx.in_node_context {
            ctx.error(
                "type",
                "loopNodes cannot be nested inside another loopNodes",
            );
        }
    }

    fn children(&self) -> Vec<(String, &[Step])> {
        vec![("steps".into(), self.steps.as_slice())]
    }
}
