//! `sleep`: wait a fixed time; the controller requeues instead of running a pod.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, StepParams};

/// Longest accepted sleep; longer waits belong in `waitFor` or a CronJob.
pub const MAX_SLEEP_SECONDS: u32 = 24 * 3600;

/// Pauses the flow for `seconds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SleepStep {
    /// At most 86400 (one day).
    #[schemars(range(max = MAX_SLEEP_SECONDS))]
    pub seconds: u32,
}

impl StepParams for SleepStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Controller
    }

    fn plan_as() -> PlanAs {
        PlanAs::NoChange
    }

    fn waits_seconds(&self) -> Option<u32> {
        Some(self.seconds)
    }
}
