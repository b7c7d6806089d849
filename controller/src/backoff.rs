//! Per-flow exponential backoff for failed reconciles: a flow whose reconcile keeps failing is
//! retried ever less often (2 s doubling to 5 min), so it cannot keep the controller and the API
//! server busy, while every other flow keeps its own pace. A success resets it. One refusal is
//! retried sooner: the API server cannot map a freshly installed kind yet ([`Backoff::unmapped`]).
//! And [`WatchBackoff`], how the controller's watches retry when the API server goes away.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// First retry delay after a failed reconcile.
pub const FIRST: Duration = Duration::from_secs(2);

/// Longest retry delay.
pub const MAX: Duration = Duration::from_secs(300);

/// Retry delay of a flow whose write the API server refused because it cannot map the flow's
/// kind yet ([`Backoff::unmapped`]).
pub const UNMAPPED: Duration = Duration::from_secs(1);

/// How many retries at [`UNMAPPED`] a flow gets before the doubling backoff takes over: more
/// than the API server's RESTMapper period (30 s), so a fresh CRD is covered, and a server that
/// never maps the kind is not asked every second for ever.
pub const UNMAPPED_TRIES: u32 = 45;

/// Consecutive failures of one flow.
#[derive(Default)]
struct Failures {
    /// Counted by [`Backoff::failed`] (and by [`Backoff::unmapped`] once its tries are spent).
    doubling: u32,
    /// Retries at [`UNMAPPED`] so far.
    unmapped: u32,
}

/// Consecutive failures, by flow (`namespace/name`).
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, Failures>>,
}

impl Backoff {
    /// Counts one more failure of `flow`; returns how long to wait before retrying it.
    pub fn failed(&self, flow: &str) -> Duration {
        let mut failures = self.failures.lock().expect("not poisoned");
        doubled(&mut failures.entry(flow.to_string()).or_default().doubling)
    }

    /// Counts one more failure of `flow` because the API server could not map the kind of an
    /// owner it was given (the flow's, its CRD installed since the server's admission last
    /// refreshed its RESTMapper: every 30 s, k8s `plugin/pkg/admission/gc`). That clears
    /// itself at the server's next refresh, so the flow is retried every [`UNMAPPED`] rather
    /// than after a doubling delay that can overshoot the refresh by up to 16 s; after
    /// [`UNMAPPED_TRIES`] such retries it backs off as [`Self::failed`].
    pub fn unmapped(&self, flow: &str) -> Duration {
        let mut failures = self.failures.lock().expect("not poisoned");
        let f = failures.entry(flow.to_string()).or_default();
        if f.unmapped < UNMAPPED_TRIES {
            f.unmapped += 1;
            return UNMAPPED;
        }
        doubled(&mut f.doubling)
    }

    /// `flow` reconciled (or is gone): its next failure waits [`FIRST`] again.
    pub fn reset(&self, flow: &str) {
        self.failures.lock().expect("not poisoned").remove(flow);
    }
}

/// The delay after `n` earlier failures (2 s doubling to [`MAX`]); counts this one.
fn doubled(n: &mut u32) -> Duration {
    let delay = FIRST.saturating_mul(2u32.saturating_pow(*n)).min(MAX);
    *n = n.saturating_add(1);
    delay
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

    #[test]
    fn an_unmapped_kind_is_retried_every_second_for_a_bounded_while_then_doubles() {
        let b = Backoff::default();
        for i in 0..UNMAPPED_TRIES {
            assert_eq!(b.unmapped("ns/a"), UNMAPPED, "retry {i}");
        }
        assert!(
            UNMAPPED * UNMAPPED_TRIES > Duration::from_secs(30),
            "covers a RESTMapper period"
        );
        let secs: Vec<u64> = (0..3).map(|_| b.unmapped("ns/a").as_secs()).collect();
        assert_eq!(secs, [2, 4, 8], "then the doubling backoff: it cannot spin");
        assert_eq!(b.failed("ns/a").as_secs(), 16, "one count for both");
        assert_eq!(
            b.unmapped("ns/b"),
            UNMAPPED,
            "another flow has its own count"
        );
        b.reset("ns/a");
        assert_eq!(b.unmapped("ns/a"), UNMAPPED, "a success starts over");
    }
}
