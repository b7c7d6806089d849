//! `log`: a message for people watching the flow, recorded as an Event; needs no pod.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, StepParams};

/// Records `message` as a Normal Event on the flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogStep {
    /// Text of the Normal Event (reason `Log`) recorded on the flow.
    pub message: String,
}

impl StepParams for LogStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Controller
    }

    fn plan_as() -> PlanAs {
        PlanAs::NoChange
    }
}
