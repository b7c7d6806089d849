//! `waitFor`: block until an object reaches a state, by watching it (no fixed polling).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::{ObjectRef, Op};

/// Default `timeoutSeconds` of a waitFor step.
pub const DEFAULT_WAIT_SECONDS: u32 = 300;

/// The state to wait for.
///
/// Exist / Deleted: the object is there / gone. Ready: condition Ready=True. Available:
/// workloads rolled out and available (observedGeneration current), other kinds condition
/// Available=True. Healthy: kstatus "Current". Custom: `jsonPath` `op` `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum WaitCondition {
    /// The object is there.
    Exist,
    /// The object is gone.
    Deleted,
    /// Condition Ready=True.
    Ready,
    /// Workloads rolled out and available; other kinds condition Available=True.
    Available,
    /// kstatus "Current".
    Healthy,
    /// `jsonPath` `op` `value` holds.
    Custom,
}

/// Waits until `resource` meets `condition` or the step times out (default 300 s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitForStep {
    /// The object to watch; `apiVersion` may be left out for well-known kinds.
    pub resource: ObjectRef,
    /// The state to wait for.
    ///
    /// Exist / Deleted: the object is there / gone. Ready: condition Ready=True. Available:
    /// workloads rolled out and available (observedGeneration current), other kinds condition
    /// Available=True. Healthy: kstatus "Current". Custom: `jsonPath` `op` `value`.
    pub condition: WaitCondition,
    /// With condition Custom: the field to test, kubectl-style, e.g. `.status.phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_path: Option<String>,
    /// With condition Custom: equals, notEquals or contains (text), greaterThan or lessThan (numbers, quantities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<Op>,
    /// With condition Custom: what the field is compared with (default: the empty string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Accepted for compatibility with the original DSL; waiting is watch-based, so this only
    /// bounds how long a silent watch is trusted before it is re-established (1 to 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::MAX_INTERVAL_SECONDS))]
    pub interval_seconds: Option<u32>,
}

impl StepParams for WaitForStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::NoChange
    }

    fn runs_in_controller(&self) -> bool {
        true
    }

    fn default_timeout_seconds(&self) -> Option<u32> {
        Some(DEFAULT_WAIT_SECONDS)
    }

    fn validate(&self, ctx: &mut Ctx) {
        self.resource.validate(&mut ctx.at("resource"));
        let custom_fields = self.json_path.is_some() || self.op.is_some() || self.value.is_some();
        match self.condition {
            WaitCondition::Custom => {
                match &self.json_path {
                    Some(p) => ctx.json_path("jsonPath", p),
                    None => ctx.error("jsonPath", "condition Custom needs jsonPath"),
                }
                if self.op.is_none() {
                    ctx.error("op", "condition Custom needs op");
                }
            }
            other if custom_fields => ctx.error(
                "condition",
                format!("jsonPath/op/value are only used with condition Custom, not {other:?}"),
            ),
            _ => {}
        }
    }
}
