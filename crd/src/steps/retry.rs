//! `retry`: rerun the whole sub-list up to `attempts` times, waiting `backoffSeconds` and
//! doubling the wait each time (capped at 10 minutes).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Nesting, Placement, PlanAs, StepParams};
use crate::common::nested_steps_schema;
use crate::step::Step;

/// Longest wait between attempts.
pub const MAX_BACKOFF_SECONDS: u64 = 600;
/// Most attempts one retry may make.
pub const MAX_ATTEMPTS: u32 = 100;

/// Retries `steps` as a unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryStep {
    /// Steps rerun as a whole, from the first, when one of them fails.
    #[schemars(schema_with = "nested_steps_schema")]
    pub steps: Vec<Step>,
    /// Total tries, including the first (1 to 100).
    #[schemars(range(min = 1, max = MAX_ATTEMPTS))]
    pub attempts: u32,
    /// Wait before the first retry, doubled for each further one (at most 600).
    #[serde(default)]
    #[schemars(range(max = MAX_BACKOFF_SECONDS))]
    pub backoff_seconds: u32,
}

impl RetryStep {
    /// Wait before attempt `n` (2 = first retry): backoff doubled per retry, capped.
    pub fn backoff_before(&self, attempt: u32) -> u64 {
        let doublings = attempt.saturating_sub(2).min(30);
        (u64::from(self.backoff_seconds) << doublings).min(MAX_BACKOFF_SECONDS)
    }
}

impl StepParams for RetryStep {
    fn times_its_body(&self) -> bool {
        true
    }

    fn placement(&self, _: bool) -> Placement {
        Placement::Structure
    }

    fn plan_as() -> PlanAs {
        PlanAs::Nested(Nesting::Always)
    }

    fn children(&self) -> Vec<(String, &[Step])> {
        vec![("steps".into(), self.steps.as_slice())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps_at_ten_minutes() {
        let r = RetryStep {
            steps: vec![],
            attempts: 10,
            backoff_seconds: 5,
        };
        let waits: Vec<u64> = (2..=10).map(|a| r.backoff_before(a)).collect();
        assert_eq!(waits, vec![5, 10, 20, 40, 80, 160, 320, 600, 600]);
    }
}
