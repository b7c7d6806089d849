//! Per-flow exponential backoff for failed reconciles: a flow whose reconcile keeps failing is
//! retried ever less often (2 s doubling to 5 min), so it cannot keep the controller and the API
//! server busy, while every other flow keeps its own pace. A success resets it. And
//! [`WatchBackoff`], how the controller's watches retry when the API server goes away.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
        let mut failures = self.failures.lock().expect("not poisoned");
        let n = failures.entry(flow.to_string()).or_default();
        let delay = FIRST.saturating_mul(2u32.saturating_pow(*n)).min(MAX);
        *n = n.saturating_add(1);
        delay
    }

    /// `flow` reconciled (or is gone): its next failure waits [`FIRST`] again.
    pub fn reset(&self, flow: &str) {
        self.failures.lock().expect("not poisoned").remove(flow);
    }
}

/// How the controller's watches are retried after an error (the API server restarted, or a
/// resumed watch is too old and must list again, which follows every API server restart): 0.5 s
/// doubling to at most [`WatchBackoff::MAX`], from the start again once
/// [`WatchBackoff::QUIET`] passed without an error. kube's default (0.8 s doubling to 30 s,
/// started again only after 2 min without an error) let the controller sit idle 4–14 s after a
/// 5 s API server restart had ended (chaos suite, controller/tests/chaos.rs), and up to 30 s
/// after a second one within two minutes: each of its watches first gets "too old resource
/// version" from the restarted server, and every error waits the next, longer delay. One
/// controller retrying two watches every 2 s costs the API server nothing.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
    last_error: Option<Instant>,
}

impl WatchBackoff {
    /// The first retry delay.
    pub const MIN: Duration = Duration::from_millis(500);
    /// The longest retry delay.
    pub const MAX: Duration = Duration::from_secs(2);
    /// After this long without an error, retries start from [`Self::MIN`] again.
    pub const QUIET: Duration = Duration::from_secs(30);

    fn delay_at(&mut self, now: Instant) -> Duration {
        if self
            .last_error
            .is_some_and(|t| now.saturating_duration_since(t) > Self::QUIET)
        {
            self.next = Self::MIN;
        }
        self.last_error = Some(now);
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        delay
    }
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: Self::MIN,
            last_error: None,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    /// The delay before the next retry, after one more error.
    fn next(&mut self) -> Option<Duration> {
        Some(self.delay_at(Instant::now()))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        *self = WatchBackoff::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_retries_double_to_two_seconds_and_start_over_after_a_quiet_spell() {
        let mut b = WatchBackoff::default();
        let t0 = Instant::now();
        let ms: Vec<u128> = (0..6)
            .map(|i| b.delay_at(t0 + Duration::from_secs(i)).as_millis())
            .collect();
        assert_eq!(ms, [500, 1000, 2000, 2000, 2000, 2000]);
        let later = t0 + Duration::from_secs(5) + WatchBackoff::QUIET + Duration::from_secs(1);
        assert_eq!(
            b.delay_at(later),
            WatchBackoff::MIN,
            "a new outage starts small"
        );
        assert_eq!(b.delay_at(later), Duration::from_secs(1));
        kube::runtime::utils::Backoff::reset(&mut b);
        assert_eq!(b.next(), Some(WatchBackoff::MIN));
    }

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
