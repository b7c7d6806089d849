//! Publishing a flow's Events (events.k8s.io/v1). Repeats of one Event — same flow, type, reason
//! and action — fold into a counted series, as kube's `Recorder` does; unlike it, what is kept
//! to fold them is a hash and the Event's name (not the whole Event and its key, for six
//! minutes), and at most [`MAX_REMEMBERED`] of them. With the `Recorder`, 1,000 flows finishing
//! within minutes held every one of their ~7,000 Events in the controller's memory at once.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

/// How many Events are remembered for folding repeats; older ones are forgotten first.
pub const MAX_REMEMBERED: usize = 4096;
/// How long a repeat still joins an Event's series (kube's `Recorder` uses the same).
const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Whether an Event tells of something normal or of a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Progress.
    Normal,
    /// A failure or refusal.
    Warning,
}

/// One Event to publish.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    /// Normal or Warning.
    pub type_: EventType,
    /// The machine-readable reason (`StepSucceeded`, ...).
    pub reason: &'a str,
    /// What the controller did; Events differing only in note fold only if actions match.
    pub action: &'a str,
    /// The human-readable message.
    pub note: &'a str,
}

/// An Event already published, to fold repeats into.
struct PublishedEvent {
    name: String,
    count: i32,
    at: Instant,
}

/// Publishes Events as one controller instance.
pub struct EventPublisher {
    client: Client,
    controller: String,
    instance: String,
    seen: Mutex<HashMap<u64, PublishedEvent>>,
    sequence: AtomicU64,
    /// The last time handed out by [`EventPublisher::stamp`], in microseconds.
    last_stamp: AtomicI64,
}

impl EventPublisher {
    /// A publisher reporting as `controller` (instance: the host name, else the controller).
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        EventPublisher {
            client,
            controller: controller.to_string(),
            instance: instance.unwrap_or_else(|| controller.to_string()),
            seen: Mutex::new(HashMap::new()),
            sequence: AtomicU64::new(0),
            last_stamp: AtomicI64::new(0),
        }
    }

    /// The time of an Event told now: the clock, but always after every time this publisher
    /// handed out before (a microsecond later at least: what `eventTime` keeps). Events are
    /// sent concurrently (`outcome::publish_soon`), so their time is taken here, in the order
    /// they are told, not when each reaches the API: sorted by time, a run's Events then read
    /// in the order its steps happened, with no tie for their random names to decide.
    pub fn stamp(&self) -> Timestamp {
        let now = Timestamp::now().as_microsecond();
        let mut last = self.last_stamp.load(Ordering::Relaxed);
        loop {
            let next = now.max(last + 1);
            match self.last_stamp.compare_exchange_weak(
                last,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Timestamp::from_microsecond(next).unwrap_or_else(|_| Timestamp::now())
                }
                Err(seen) => last = seen,
            }
        }
    }

    /// Creates the Event, or counts it into the series of the same Event published within the
    /// last six minutes, at the time [`EventPublisher::stamp`] gives now.
    pub async fn publish(
        &self,
        ev: &NewEvent<'_>,
        about: &ObjectReference,
    ) -> Result<(), kube::Error> {
        self.publish_at(ev, about, self.stamp()).await
    }

    /// [`EventPublisher::publish`], at time `at` (a [`EventPublisher::stamp`] taken when the
    /// Event was told).
    pub async fn publish_at(
        &self,
        ev: &NewEvent<'_>,
        about: &ObjectReference,
        at: Timestamp,
    ) -> Result<(), kube::Error> {
        let ns = about.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let key = key_of(ev, about);
        if let Some((name, count)) = self.repeat(key) {
            let series = json!({"series": {"count": count, "lastObservedTime": MicroTime(at)}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => return Ok(()),
                // Deleted or expired meanwhile: publish it anew.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let event = self.event(ev, about, at);
        let name = event.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), &event).await?;
        self.remember(key, name);
        Ok(())
    }

    /// The series name and new count if `key` was published within the window.
    fn repeat(&self, key: u64) -> Option<(String, i32)> {
        let mut seen = self.seen.lock().expect("not poisoned");
        let s = seen
            .get_mut(&key)
            .filter(|s| s.at.elapsed() < SERIES_WINDOW)?;
        s.count += 1;
        s.at = Instant::now();
        Some((s.name.clone(), s.count))
    }

    fn remember(&self, key: u64, name: String) {
        let mut seen = self.seen.lock().expect("not poisoned");
        if seen.len() >= MAX_REMEMBERED {
            seen.retain(|_, s| s.at.elapsed() < SERIES_WINDOW);
        }
        if seen.len() >= MAX_REMEMBERED {
            // Still full of recent Events: forget the oldest half rather than grow.
            let mut ages: Vec<Instant> = seen.values().map(|s| s.at).collect();
            ages.sort();
            let cut = ages[ages.len() / 2];
            seen.retain(|_, s| s.at > cut);
        }
        seen.insert(
            key,
            PublishedEvent {
                name,
                count: 1,
                at: Instant::now(),
            },
        );
    }

    fn event(&self, ev: &NewEvent<'_>, about: &ObjectReference, at: Timestamp) -> Event {
        let unique = at.as_nanosecond() as u64 ^ self.sequence.fetch_add(1, Ordering::Relaxed);
        let base = about.name.as_deref().unwrap_or(&self.controller);
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{base}.{unique:x}")),
                namespace: about.namespace.clone(),
                ..Default::default()
            },
            event_time: Some(MicroTime(at)),
            action: Some(ev.action.to_string()),
            reason: Some(ev.reason.to_string()),
            note: Some(ev.note.to_string()),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            regarding: Some(about.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        }
    }

    /// How many Events are remembered for folding (for tests and the bound).
    pub fn remembered(&self) -> usize {
        self.seen.lock().expect("not poisoned").len()
    }
}

/// What makes two Events the same: the object (by uid, else namespace and name), type, reason
/// and action.
fn key_of(ev: &NewEvent<'_>, about: &ObjectReference) -> u64 {
    let mut h = DefaultHasher::new();
    (
        &about.uid,
        &about.namespace,
        &about.name,
        &about.kind,
        ev.type_,
        ev.reason,
        ev.action,
    )
        .hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publisher() -> EventPublisher {
        // Never contacted: these tests exercise only the folding memory.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        EventPublisher::new(client, "pseudoflow-controller", None)
    }

    fn about(name: &str) -> ObjectReference {
        ObjectReference {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        }
    }

    fn ev<'a>(reason: &'a str, action: &'a str) -> NewEvent<'a> {
        NewEvent {
            type_: EventType::Normal,
            reason,
            action,
            note: "n",
        }
    }

    #[tokio::test]
    async fn a_repeat_joins_the_series_of_the_first_and_a_different_event_does_not() {
        let p = publisher();
        let k = key_of(&ev("StepSucceeded", "a"), &about("f"));
        p.remember(k, "f.1".into());
        assert_eq!(p.repeat(k), Some(("f.1".into(), 2)));
        assert_eq!(p.repeat(k), Some(("f.1".into(), 3)));
        for other in [
            key_of(&ev("StepSucceeded", "b"), &about("f")),
            key_of(&ev("StepFailed", "a"), &about("f")),
            key_of(&ev("StepSucceeded", "a"), &about("g")),
        ] {
            assert_ne!(other, k);
            assert_eq!(p.repeat(other), None);
        }
    }

    #[tokio::test]
    async fn every_stamp_is_later_than_the_one_before_even_within_one_microsecond() {
        let p = publisher();
        let stamps: Vec<Timestamp> = (0..10_000).map(|_| p.stamp()).collect();
        assert!(stamps.windows(2).all(|w| w[0] < w[1]));
        // Kept as eventTime (microseconds): still distinct.
        let micros: Vec<i64> = stamps.iter().map(|t| t.as_microsecond()).collect();
        assert!(micros.windows(2).all(|w| w[0] < w[1]));
    }

    #[tokio::test]
    async fn the_memory_stays_bounded_however_many_events_are_published() {
        let p = publisher();
        for i in 0..(3 * MAX_REMEMBERED) {
            let name = format!("flow-{i}");
            p.remember(key_of(&ev("RunSucceeded", "x"), &about(&name)), name);
            assert!(p.remembered() <= MAX_REMEMBERED, "{}", p.remembered());
        }
        // The newest is still folded into.
        let last = format!("flow-{}", 3 * MAX_REMEMBERED - 1);
        let k = key_of(&ev("RunSucceeded", "x"), &about(&last));
        assert_eq!(p.repeat(k), Some((last, 2)));
    }
}
