//! Who may run an API step in the controller now, so that no flow and no namespace can take
//! every turn from the others (docs/decisions.md#api-steps-in-the-controller):
//!
//! - a **work turn** is held while a step makes its calls: one of the flow's
//!   [`MAX_STEPS_IN_CONTROLLER_PER_FLOW`], of its namespace's
//!   [`MAX_STEPS_IN_CONTROLLER_PER_NAMESPACE`] and of the controller's [`MAX_STEPS_IN_CONTROLLER`];
//! - a **waiting place** is held by a step parked on a watch (a `waitFor`, a `delete` waiting for
//!   its object to go): one of its namespace's [`MAX_WAITS_IN_CONTROLLER_PER_NAMESPACE`] and of
//!   the controller's [`MAX_WAITS_IN_CONTROLLER`]. A parked step holds no work turn, so waits
//!   that never come true cost places (memory and one watch each), never turns.
//!
//! Every semaphore is FIFO, and each is taken narrowest first (flow, namespace, controller): a
//! step never holds a wider share while it queues for a narrower one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::limits::{
    MAX_STEPS_IN_CONTROLLER, MAX_STEPS_IN_CONTROLLER_PER_FLOW,
    MAX_STEPS_IN_CONTROLLER_PER_NAMESPACE, MAX_WAITS_IN_CONTROLLER,
    MAX_WAITS_IN_CONTROLLER_PER_NAMESPACE,
};

/// The controller's turns and waiting places, shared by every reconciler that runs steps.
pub struct Turns {
    work: Arc<Semaphore>,
    work_per_namespace: Shares,
    work_per_flow: Shares,
    waits: Arc<Semaphore>,
    waits_per_namespace: Shares,
}

impl Default for Turns {
    fn default() -> Self {
        Turns {
            work: Arc::new(Semaphore::new(MAX_STEPS_IN_CONTROLLER)),
            work_per_namespace: Shares::new(MAX_STEPS_IN_CONTROLLER_PER_NAMESPACE),
            work_per_flow: Shares::new(MAX_STEPS_IN_CONTROLLER_PER_FLOW),
            waits: Arc::new(Semaphore::new(MAX_WAITS_IN_CONTROLLER)),
            waits_per_namespace: Shares::new(MAX_WAITS_IN_CONTROLLER_PER_NAMESPACE),
        }
    }
}

/// A work turn: the step may make its calls. Dropped, the turn is free.
pub struct Turn {
    _flow: OwnedSemaphorePermit,
    _namespace: OwnedSemaphorePermit,
    _controller: OwnedSemaphorePermit,
}

/// A waiting place: the step may keep a watch open. Dropped, the place is free.
pub struct Place {
    _namespace: OwnedSemaphorePermit,
    _controller: OwnedSemaphorePermit,
}

impl Turns {
    /// Waits for a work turn for a step of flow `flow_uid` in `namespace`.
    pub async fn turn(&self, namespace: &str, flow_uid: &str) -> Turn {
        let flow = self.work_per_flow.of(flow_uid);
        let ns = self.work_per_namespace.of(namespace);
        Turn {
            _flow: permit(flow).await,
            _namespace: permit(ns).await,
            _controller: permit(self.work.clone()).await,
        }
    }

    /// Waits for a waiting place in `namespace`.
    pub async fn place(&self, namespace: &str) -> Place {
        let ns = self.waits_per_namespace.of(namespace);
        Place {
            _namespace: permit(ns).await,
            _controller: permit(self.waits.clone()).await,
        }
    }
}

/// Reads of one bound object at a time (`bind/parent/changed.rs`), shared as work turns are:
/// at most [`OBJECT_READS_PER_NAMESPACE`] for the bound flows of one namespace, of
/// [`OBJECT_READS`] in all. Each read holds the object whole, as text, until it is cut, so the
/// total bounds the memory; the share per namespace keeps one tenant's burst (or a kind whose
/// API answers slowly) from queueing every other tenant's reads.
pub struct ObjectReads {
    all: Arc<Semaphore>,
    per_namespace: Shares,
}

/// Objects read at once, across all bound flows.
pub const OBJECT_READS: usize = 8;
/// Objects read at once for the bound flows of one namespace.
pub const OBJECT_READS_PER_NAMESPACE: usize = OBJECT_READS / 2;

impl Default for ObjectReads {
    fn default() -> Self {
        ObjectReads {
            all: Arc::new(Semaphore::new(OBJECT_READS)),
            per_namespace: Shares::new(OBJECT_READS_PER_NAMESPACE),
        }
    }
}

/// A read of one object may go on. Dropped, it is free.
pub struct ObjectRead {
    _namespace: OwnedSemaphorePermit,
    _controller: OwnedSemaphorePermit,
}

impl ObjectReads {
    /// Waits for a read for a bound flow of `namespace` (its own share first).
    pub async fn read(&self, namespace: &str) -> ObjectRead {
        let ns = self.per_namespace.of(namespace);
        ObjectRead {
            _namespace: permit(ns).await,
            _controller: permit(self.all.clone()).await,
        }
    }
}

async fn permit(s: Arc<Semaphore>) -> OwnedSemaphorePermit {
    s.acquire_owned().await.expect("never closed")
}

/// One semaphore of `size` per key (flow or namespace), forgotten once nobody holds or waits
/// for it, so keys that come and go cost nothing.
struct Shares {
    size: usize,
    by_key: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Shares {
    fn new(size: usize) -> Self {
        Shares {
            size,
            by_key: Mutex::default(),
        }
    }

    fn of(&self, key: &str) -> Arc<Semaphore> {
        let mut by_key = self.by_key.lock().expect("not poisoned");
        // A semaphore only the map refers to has no permit out and nobody queued on it.
        by_key.retain(|_, s| Arc::strong_count(s) > 1);
        by_key
            .entry(key.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.size)))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn within<F: std::future::Future>(f: F) -> Option<F::Output> {
        tokio::time::timeout(Duration::from_millis(100), f)
            .await
            .ok()
    }

    #[tokio::test]
    async fn one_namespace_reads_at_most_its_share_of_objects_and_another_still_reads() {
        let reads = ObjectReads::default();
        let mut held = Vec::new();
        for _ in 0..OBJECT_READS_PER_NAMESPACE {
            held.push(reads.read("tenant").await);
        }
        assert!(within(reads.read("tenant")).await.is_none(), "its share");
        for _ in 0..OBJECT_READS - OBJECT_READS_PER_NAMESPACE {
            held.push(within(reads.read("other")).await.expect("not the tenant's"));
        }
        assert!(within(reads.read("third")).await.is_none(), "all taken");
        held.pop();
        assert!(within(reads.read("third")).await.is_some(), "one freed");
    }

    #[tokio::test]
    async fn one_namespace_takes_at_most_its_share_of_the_work_turns() {
        let turns = Turns::default();
        let mut held = Vec::new();
        for i in 0..MAX_STEPS_IN_CONTROLLER_PER_NAMESPACE {
            held.push(turns.turn("tenant", &format!("flow{i}")).await);
        }
        assert!(
            within(turns.turn("tenant", "another")).await.is_none(),
            "past its namespace's share"
        );
        assert!(
            within(turns.turn("other", "flow")).await.is_some(),
            "another namespace still has turns"
        );
    }

    #[tokio::test]
    async fn one_flow_takes_at_most_its_share_and_a_freed_turn_is_taken_again() {
        let turns = Turns::default();
        let mut held = Vec::new();
        for _ in 0..MAX_STEPS_IN_CONTROLLER_PER_FLOW {
            held.push(turns.turn("ns", "flow").await);
        }
        assert!(within(turns.turn("ns", "flow")).await.is_none());
        assert!(within(turns.turn("ns", "sibling")).await.is_some());
        held.pop();
        assert!(within(turns.turn("ns", "flow")).await.is_some());
    }

    #[tokio::test]
    async fn waiting_places_are_apart_from_work_turns_and_shared_per_namespace() {
        let turns = Turns::default();
        let mut places = Vec::new();
        for _ in 0..MAX_WAITS_IN_CONTROLLER_PER_NAMESPACE {
            places.push(turns.place("tenant").await);
        }
        assert!(within(turns.place("tenant")).await.is_none());
        assert!(within(turns.place("other")).await.is_some());
        assert!(
            within(turns.turn("tenant", "flow")).await.is_some(),
            "a namespace's waits take none of its work turns"
        );
    }

    #[tokio::test]
    async fn shares_nobody_holds_are_forgotten() {
        let turns = Turns::default();
        drop(turns.turn("ns", "flow").await);
        let _ = turns.work_per_flow.of("another");
        assert_eq!(turns.work_per_flow.by_key.lock().unwrap().len(), 1);
    }
}
