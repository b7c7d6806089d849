//! `loopNodes`: run node steps on every node a label selector matches, `maxParallel` nodes at a
//! time (default 1: a rolling change, safest for kubelet restarts); `${node}` names the node.
//! `drain:` cordons and drains each node before its steps and uncordons it after them; `gate:`
//! checks waitFor conditions after each node before the rollout goes on (see
//! docs/decisions.md#node-maintenance).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::drain::DrainPods;
use super::wait_for::WaitForStep;
use super::{Nesting, Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::nested_steps_schema;
use crate::selector::LabelSelector;
use crate::step::Step;

/// Runs `steps` per matching node; a failed node stops the rollout. With `drain:` each node is
/// drained before its steps and uncordoned after them; with `gate:` the rollout goes on only
/// once the gate's conditions hold after each node. Per node: drain → steps → uncordon → gate.
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
    /// Cordon and drain each node before its steps, uncordon it after they succeed (only a
    /// cordon this flow made is lifted). A failed drain stops the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<LoopDrain>,
    /// Conditions checked after each node (after its uncordon) before the next node starts; one
    /// not met within the timeout stops the rollout, naming the node and the condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<LoopGate>,
}

/// loopNodes' `drain:` — the `drain` step's options, run as `drain` before each node's steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoopDrain {
    /// Which pods go and how.
    #[serde(flatten)]
    pub pods: DrainPods,
    /// How long each node's drain may take (default 600 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::MAX_DURATION_SECONDS))]
    pub timeout_seconds: Option<u32>,
}

/// loopNodes' `gate:` — health conditions between nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoopGate {
    /// waitFor conditions (`resource`, `condition`, and `jsonPath`/`op`/`value` for Custom),
    /// checked in order; `${node}` names the node just changed.
    pub conditions: Vec<WaitForStep>,
    /// How long each condition may take to hold (default 300 s, as waitFor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::MAX_DURATION_SECONDS))]
    pub timeout_seconds: Option<u32>,
}

impl StepParams for LoopNodesStep {
    fn times_its_body(&self) -> bool {
        true
    }

    fn placement(&self, _: bool) -> Placement {
        Placement::Structure
    }

    fn plan_as() -> PlanAs {
        PlanAs::Nested(Nesting::EachNode)
    }

    fn validate(&self, ctx: &mut Ctx) {
        ctx.label_selector("selector", &self.selector);
        if ctx.in_node_context {
            ctx.error(
                "type",
                "loopNodes cannot be nested inside another loopNodes",
            );
        }
        if let Some(d) = &self.drain {
            d.pods.validate(&mut ctx.at("drain"));
        }
        if let Some(g) = &self.gate {
            if g.conditions.is_empty() {
                ctx.error("gate.conditions", "a gate needs at least one condition");
            }
            for (i, c) in g.conditions.iter().enumerate() {
                c.validate(&mut ctx.at(&format!("gate.conditions[{i}]")));
            }
        }
    }

    fn children(&self) -> Vec<(String, &[Step])> {
        vec![("steps".into(), self.steps.as_slice())]
    }
}
