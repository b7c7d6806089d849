//! Which objects of a bound flow changed since its reconcile last served them, as its watch and
//! its children's watch saw them. A reconcile serves just those (a GET of the object and of its
//! flow each) instead of listing every object and every child flow, so a burst of N new objects
//! costs the API server O(N) small reads, not two lists of N per reconcile. A full pass (every
//! object, every child) still runs when this process first serves the flow, after the flow
//! changed, after its watch listed anew or failed, when a related object changed, when more
//! objects changed than are kept here, while an older controller's children remain, and every
//! [`FULL_PASS_EVERY`]: whatever a change the watch missed, the full pass serves it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a bound flow looks at every object even when its watch told of no change.
pub const FULL_PASS_EVERY: Duration = Duration::from_secs(300);
/// Changed objects kept per bound flow; beyond, the next reconcile is a full pass.
pub const MAX_CHANGED: usize = 10_000;
/// The least time between two summaries of a bound flow's objects in its status (each reads
/// every child's state); a reconcile between them serves objects and leaves the summary to a
/// later one.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(1);

/// What one reconcile of a bound flow serves.
#[derive(Debug, PartialEq, Eq)]
pub enum Pass {
    /// Every object and every child flow.
    Full,
    /// Only these objects, by (namespace, name).
    Changed(BTreeSet<(String, String)>),
}

/// What is kept per bound flow (by uid).
#[derive(Default)]
struct Flow {
    changed: BTreeSet<(String, String)>,
    /// The next reconcile must be a full pass.
    everything: bool,
    /// The generation and time of the last full pass that completed.
    full: Option<(i64, Instant)>,
    /// Whether the last full pass found children an older controller named.
    legacy: bool,
    /// Why objects could not be served, by object key, for the summary.
    refused: BTreeMap<String, String>,
    summarised: Option<Instant>,
}

/// The changes every bound flow has not served yet.
#[derive(Default)]
pub struct Pending {
    flows: Mutex<HashMap<String, Flow>>,
}

impl Pending {
    /// Object `ns/name` of bound flow `uid` changed (only for a flow served since this process
    /// started: before its first reconcile, which is a full pass, nothing needs keeping).
    pub fn changed(&self, uid: &str, ns: &str, name: &str) {
        let mut flows = self.flows.lock().expect("not poisoned");
        let Some(f) = flows.get_mut(uid) else {
            return;
        };
        if f.changed.len() >= MAX_CHANGED {
            f.changed.clear();
            f.everything = true;
            return;
        }
        f.changed.insert((ns.to_string(), name.to_string()));
    }

    /// Bound flow `uid`'s next reconcile looks at every object (its watch listed anew or
    /// failed, a related object changed).
    pub fn everything(&self, uid: &str) {
        if let Some(f) = self.flows.lock().expect("not poisoned").get_mut(uid) {
            f.everything = true;
        }
    }

    /// What this reconcile of bound flow `uid` (at `generation`) serves. The changes are taken
    /// now: those seen while it serves are kept for the next.
    pub fn take(&self, uid: &str, generation: i64) -> Pass {
        let mut flows = self.flows.lock().expect("not poisoned");
        let f = flows.entry(uid.to_string()).or_default();
        let changed = std::mem::take(&mut f.changed);
        let due = f.everything
            || f.legacy
            || f.full
                .is_none_or(|(g, at)| g != generation || at.elapsed() >= FULL_PASS_EVERY);
        if due {
            f.everything = false;
            return Pass::Full;
        }
        Pass::Changed(changed)
    }

    /// Whether a full pass of bound flow `uid` completed in this process (at any generation):
    /// then every object it serves has been looked at, and what is known of them is whole.
    pub fn passed(&self, uid: &str) -> bool {
        let flows = self.flows.lock().expect("not poisoned");
        flows.get(uid).is_some_and(|f| f.full.is_some())
    }

    /// A full pass at `generation` completed: its refusals replace those kept.
    pub fn full_pass_done(
        &self,
        uid: &str,
        generation: i64,
        legacy: bool,
        refused: BTreeMap<String, String>,
    ) {
        let mut flows = self.flows.lock().expect("not poisoned");
        let f = flows.entry(uid.to_string()).or_default();
        f.full = Some((generation, Instant::now()));
        f.legacy = legacy;
        f.refused = refused;
    }

    /// Object `key` was served (`None`) or refused (why): kept for the summary.
    pub fn served(&self, uid: &str, key: &str, refusal: Option<&str>) {
        let mut flows = self.flows.lock().expect("not poisoned");
        let Some(f) = flows.get_mut(uid) else {
            return;
        };
        match refusal {
            Some(why) => f.refused.insert(key.to_string(), why.to_string()),
            None => f.refused.remove(key),
        };
    }

    /// The objects of bound flow `uid` that could not be served, with why.
    pub fn refused(&self, uid: &str) -> BTreeMap<String, String> {
        let flows = self.flows.lock().expect("not poisoned");
        flows
            .get(uid)
            .map(|f| f.refused.clone())
            .unwrap_or_default()
    }

    /// Whether bound flow `uid` sums up its objects now (then it is told so); otherwise how
    /// soon it may.
    pub fn summary_due(&self, uid: &str) -> Result<(), Duration> {
        let mut flows = self.flows.lock().expect("not poisoned");
        let f = flows.entry(uid.to_string()).or_default();
        if let Some(wait) = f
            .summarised
            .map(|at| SUMMARY_EVERY.saturating_sub(at.elapsed()))
            .filter(|w| !w.is_zero())
        {
            return Err(wait);
        }
        f.summarised = Some(Instant::now());
        Ok(())
    }

    /// Bound flow `uid` sums up its objects now whatever [`Pending::summary_due`] says (a full
    /// pass always does).
    pub fn summarised(&self, uid: &str) {
        let mut flows = self.flows.lock().expect("not poisoned");
        flows.entry(uid.to_string()).or_default().summarised = Some(Instant::now());
    }

    /// Forgets bound flow `uid` (deleted, or no longer bound).
    pub fn forget(&self, uid: &str) {
        self.flows.lock().expect("not poisoned").remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        items
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn the_first_pass_is_full_then_only_what_changed_is_served() {
        let p = Pending::default();
        p.changed("u", "ns", "before-first-pass");
        assert_eq!(p.take("u", 1), Pass::Full);
        p.full_pass_done("u", 1, false, BTreeMap::new());
        p.changed("u", "ns", "a");
        p.changed("u", "ns", "b");
        p.changed("u", "ns", "a");
        assert_eq!(
            p.take("u", 1),
            Pass::Changed(set(&[("ns", "a"), ("ns", "b")]))
        );
        assert_eq!(p.take("u", 1), Pass::Changed(set(&[])));
    }

    #[test]
    fn a_full_pass_follows_a_new_generation_a_relist_an_overflow_and_legacy_children() {
        let p = Pending::default();
        assert_eq!(p.take("u", 1), Pass::Full);
        p.full_pass_done("u", 1, false, BTreeMap::new());
        assert_eq!(p.take("u", 2), Pass::Full, "the flow changed");
        p.full_pass_done("u", 2, false, BTreeMap::new());
        p.everything("u");
        assert_eq!(p.take("u", 2), Pass::Full, "the watch listed anew");
        p.full_pass_done("u", 2, false, BTreeMap::new());
        for i in 0..=MAX_CHANGED {
            p.changed("u", "ns", &format!("o{i}"));
        }
        assert_eq!(p.take("u", 2), Pass::Full, "more changed than is kept");
        p.full_pass_done("u", 2, true, BTreeMap::new());
        assert_eq!(
            p.take("u", 2),
            Pass::Full,
            "an older controller's children remain"
        );
    }

    #[test]
    fn a_pass_that_did_not_complete_is_followed_by_a_full_one() {
        let p = Pending::default();
        assert_eq!(p.take("u", 1), Pass::Full);
        // No full_pass_done: the pass failed half way.
        assert_eq!(p.take("u", 1), Pass::Full);
    }

    #[test]
    fn refusals_are_kept_across_passes_until_served() {
        let p = Pending::default();
        assert_eq!(p.take("u", 1), Pass::Full);
        let first = BTreeMap::from([("ns/a".to_string(), "too deep".to_string())]);
        p.full_pass_done("u", 1, false, first);
        p.served("u", "ns/b", Some("no rights"));
        assert_eq!(p.refused("u").len(), 2);
        p.served("u", "ns/a", None);
        assert_eq!(p.refused("u").keys().collect::<Vec<_>>(), ["ns/b"]);
    }

    #[test]
    fn summaries_come_at_most_once_a_second() {
        let p = Pending::default();
        assert_eq!(p.summary_due("u"), Ok(()));
        let wait = p.summary_due("u").unwrap_err();
        assert!(wait <= SUMMARY_EVERY && !wait.is_zero());
    }
}
