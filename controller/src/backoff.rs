//! Per-flow exponential backoff for failed reconciles: a flow whose reconcile keeps failing is
//! retried ever less often (2 s doubling to 5 min), so it cannot keep the controller and the API
//! server busy, while every other flow keeps its own pace. A success resets it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// First retry delay after a failed reconcile.
pub const FIRST: Duration = Duration::from_secs(2);

/// Longest retry delay.
pub const MAX: Duration = Duration::from_secs(300);

/// Consecutive failures, by flow (`namespace/name`).
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Counts one more failure of `flow`; returns how long to wait before retrying it.
    pub fn failed(&self, flow: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap();
        let n = failures.entry(flow.to_string()).or_default();
        let delay = FIRST.saturating_mul(2u32.saturating_pow(*n)).min(MAX);
        *n = n.saturating_add(1);
        delay
    }

    /// `flow` reconciled (or is gone): its next failure waits [`FIRST`] again.
    pub fn reset(&self, flow: &str) {
        self.failures.lock().unwrap().remove(flow);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_per_flow_and_reset_on_success() {
        let b = Backoff::default();
        let secs: Vec<u64> = (0..10).map(|_| b.failed("ns/a").as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(b.failed("ns/b"), FIRST, "another flow has its own count");
        b.reset("ns/a");
        assert_eq!(b.failed("ns/a"), FIRST);
        for _ in 0..100 {
            b.failed("ns/c");
        }
        assert_eq!(b.failed("ns/c"), MAX, "no overflow after many failures");
    }
}
