//! What the serves of a flow recorded in its objects saw, for the bound flow's `status.bound`
//! (there is no child to count): per object, whether its latest run failed and why. Kept in
//! memory, one small entry per object (its key and a failure message cut to 512 characters),
//! dropped when the object goes or the flow is released; after a restart, each object's entry
//! comes back from its own status at the next full pass. Also each failing object's retry
//! schedule ([`super::retry::Schedule`]), so a reconcile serves the objects whose attempt is due
//! and is requeued for the next one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use pseudoflow_crd::bind::MAX_FAILURES_SHOWN;
use pseudoflow_crd::status::{BoundFailure, BoundSummary};

use super::retry::Schedule;
use crate::bind::rollout::plan::{LatestRun, Record};

/// One object's latest run: its failure (None: it succeeded) and when it ended (Unix seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Why it failed.
    pub failure: Option<String>,
    /// When it ended (newest failures are listed first).
    pub at: i64,
    /// The hash of the revision that served it (None: served before revisions were kept).
    pub revision: Option<String>,
}

/// The outcomes of every flow recorded in its objects, by flow uid, then object key; the
/// retry schedules of its failing objects, the same way; and the objects whose run is going,
/// with the hash of the revision it runs (what a rollout counts it on).
#[derive(Default)]
pub struct Outcomes(
    Mutex<HashMap<String, BTreeMap<String, Outcome>>>,
    Mutex<HashMap<String, BTreeMap<String, Schedule>>>,
    Mutex<HashMap<String, BTreeMap<String, Option<String>>>>,
);

impl Outcomes {
    /// Records object `object`'s latest outcome for flow `flow` (None: the object left).
    pub fn record(&self, flow: &str, object: String, outcome: Option<Outcome>) {
        if let Some(going) = self.2.lock().expect("not poisoned").get_mut(flow) {
            going.remove(&object);
        }
        let mut all = self.0.lock().expect("not poisoned");
        let of_flow = all.entry(flow.to_string()).or_default();
        match outcome {
            Some(mut o) => {
                o.failure = o.failure.map(|m| crate::limits::bounded(&m, 512));
                of_flow.insert(object, o);
            }
            None => {
                of_flow.remove(&object);
                drop(all);
                self.schedule(flow, &object, None);
            }
        }
    }

    /// Object `object`'s run for flow `flow` started, with revision `revision` (its hash):
    /// counted as `creating` until its end is [`Outcomes::record`]ed.
    pub fn running(&self, flow: &str, object: &str, revision: Option<String>) {
        let mut going = self.2.lock().expect("not poisoned");
        going
            .entry(flow.to_string())
            .or_default()
            .insert(object.to_string(), revision);
    }

    /// Flow `flow`'s objects as a rollout plans from them ([`crate::bind::rollout::plan`]):
    /// each with the revision that last served it (or serves it now) and its latest run.
    pub fn records(&self, flow: &str) -> Vec<Record> {
        let going = self.2.lock().expect("not poisoned");
        let none = BTreeMap::new();
        let going = going.get(flow).unwrap_or(&none);
        let all = self.0.lock().expect("not poisoned");
        let empty = BTreeMap::new();
        let of_flow = all.get(flow).unwrap_or(&empty);
        let mut out: BTreeMap<&String, Record> = BTreeMap::new();
        for (key, o) in of_flow {
            let state = match o.failure {
                Some(_) => LatestRun::Failed,
                None => LatestRun::Ready(o.at),
            };
            let revision = o.revision.clone();
            out.insert(
                key,
                Record {
                    key: key.clone(),
                    revision,
                    state,
                },
            );
        }
        for (key, revision) in going {
            let revision = revision.clone();
            let state = LatestRun::Running;
            out.insert(
                key,
                Record {
                    key: key.clone(),
                    revision,
                    state,
                },
            );
        }
        out.into_values().collect()
    }

    /// Sets (or with None, drops) object `object`'s retry schedule for flow `flow`.
    pub fn schedule(&self, flow: &str, object: &str, schedule: Option<Schedule>) {
        let mut all = self.1.lock().expect("not poisoned");
        match schedule {
            Some(s) => {
                all.entry(flow.to_string())
                    .or_default()
                    .insert(object.to_string(), s);
            }
            None => {
                if let Some(of_flow) = all.get_mut(flow) {
                    of_flow.remove(object);
                }
            }
        }
    }

    /// Object `object`'s retry schedule for flow `flow`, if it is failing.
    pub fn scheduled(&self, flow: &str, object: &str) -> Option<Schedule> {
        let all = self.1.lock().expect("not poisoned");
        all.get(flow)?.get(object).cloned()
    }

    /// The objects (namespace, name) of flow `flow` whose retry is due at `now`, and when the
    /// next of the others is (Unix seconds). With `hold_for`, those listed are not listed again
    /// before that many seconds per their backoff (`hold_for(failures)`) have passed.
    pub fn due(
        &self,
        flow: &str,
        now: i64,
        hold_for: Option<&dyn Fn(u32) -> i64>,
    ) -> (Vec<(String, String)>, Option<i64>) {
        let mut all = self.1.lock().expect("not poisoned");
        let mut due = Vec::new();
        let mut next: Option<i64> = None;
        for s in all.get_mut(flow).into_iter().flat_map(|f| f.values_mut()) {
            let at = s.due.max(s.held);
            if at <= now {
                due.push(s.object.clone());
                if let Some(hold) = hold_for {
                    s.held = now.saturating_add(hold(s.failures));
                }
            } else {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        (due, next)
    }

    /// Flow `flow`'s objects counted per the hash of the revision that last served them.
    pub fn by_revision(&self, flow: &str) -> BTreeMap<String, u32> {
        let all = self.0.lock().expect("not poisoned");
        let mut out = BTreeMap::new();
        let served = all.get(flow).into_iter().flat_map(|f| f.values());
        for h in served.filter_map(|o| o.revision.as_ref()) {
            *out.entry(h.clone()).or_insert(0) += 1;
        }
        out
    }

    /// Forgets flow `flow`'s objects not in `listed` (gone without a watch event this process
    /// saw), and their retry schedules.
    pub fn retain(&self, flow: &str, listed: &BTreeSet<String>) {
        if let Some(of_flow) = self.0.lock().expect("not poisoned").get_mut(flow) {
            of_flow.retain(|k, _| listed.contains(k));
        }
        if let Some(of_flow) = self.1.lock().expect("not poisoned").get_mut(flow) {
            of_flow.retain(|k, _| listed.contains(k));
        }
    }

    /// Records `outcome` for `object` unless one is known already.
    pub fn record_if_unknown(&self, flow: &str, object: &str, outcome: Outcome) {
        let mut all = self.0.lock().expect("not poisoned");
        let of_flow = all.entry(flow.to_string()).or_default();
        if !of_flow.contains_key(object) {
            of_flow.insert(object.to_string(), outcome);
        }
    }

    /// Forgets flow `flow` (released).
    pub fn forget(&self, flow: &str) {
        self.0.lock().expect("not poisoned").remove(flow);
        self.1.lock().expect("not poisoned").remove(flow);
        self.2.lock().expect("not poisoned").remove(flow);
    }

    /// The summary of flow `flow`'s objects, with `refused` (object, why) counted as failed.
    pub fn summary(&self, flow: &str, refused: &[(String, String)]) -> BoundSummary {
        let going = self.2.lock().expect("not poisoned");
        let none = BTreeMap::new();
        let going = going.get(flow).unwrap_or(&none);
        let all = self.0.lock().expect("not poisoned");
        let empty = BTreeMap::new();
        let of_flow = all.get(flow).unwrap_or(&empty);
        let mut s = BoundSummary::default();
        let mut failures: Vec<(i64, BoundFailure)> = Vec::new();
        let first_runs = going.keys().filter(|o| !of_flow.contains_key(*o)).count();
        for (object, o) in of_flow {
            if going.contains_key(object) {
                s.creating += 1;
                continue;
            }
            match &o.failure {
                None => s.running += 1,
                Some(message) => failures.push((
                    o.at,
                    BoundFailure {
                        object: object.clone(),
                        message: message.clone(),
                    },
                )),
            }
        }
        s.creating += first_runs as u32;
        let known = |o: &String| of_flow.contains_key(o) || going.contains_key(o);
        let refusals = refused.iter().filter(|(o, _)| !known(o));
        s.objects = (of_flow.len() + first_runs + refusals.clone().count()) as u32;
        s.failed = (failures.len() + refusals.clone().count()) as u32;
        failures.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.object.cmp(&b.1.object)));
        let refusals = refusals.map(|(object, message)| BoundFailure {
            object: object.clone(),
            message: crate::limits::bounded(message, 512),
        });
        s.failures = refusals
            .chain(failures.into_iter().map(|(_, f)| f))
            .take(MAX_FAILURES_SHOWN)
            .collect();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(m: &str, at: i64) -> Option<Outcome> {
        Some(Outcome {
            failure: Some(m.into()),
            at,
            revision: None,
        })
    }

    #[test]
    fn objects_are_counted_by_outcome_newest_failure_first_and_forgotten_when_they_leave() {
        let o = Outcomes::default();
        o.record(
            "f",
            "ns/a".into(),
            Some(Outcome {
                failure: None,
                at: 1,
                revision: None,
            }),
        );
        o.record("f", "ns/b".into(), failed("old", 2));
        o.record("f", "ns/c".into(), failed("new", 3));
        o.record("g", "ns/x".into(), failed("other flow", 9));
        let refused = [("ns/d".to_string(), "too deep".to_string())];
        let s = o.summary("f", &refused);
        assert_eq!((s.objects, s.running, s.failed, s.creating), (4, 1, 3, 0));
        let order: Vec<&str> = s.failures.iter().map(|f| f.object.as_str()).collect();
        assert_eq!(order, ["ns/d", "ns/c", "ns/b"]);
        o.record_if_unknown(
            "f",
            "ns/b",
            Outcome {
                failure: None,
                at: 5,
                revision: None,
            },
        );
        assert_eq!(o.summary("f", &[]).failed, 2, "known: kept");
        o.record_if_unknown(
            "f",
            "ns/e",
            Outcome {
                failure: None,
                at: 5,
                revision: None,
            },
        );
        assert_eq!(o.summary("f", &[]).running, 2, "unknown: recorded");
        o.record("f", "ns/e".into(), None);
        o.record("f", "ns/c".into(), None);
        assert_eq!(o.summary("f", &[]).objects, 2);
        o.forget("f");
        assert_eq!(o.summary("f", &[]), BoundSummary::default());
        assert_eq!(o.due("f", 0, None), (vec![], None));
        assert_eq!(o.summary("g", &[]).failed, 1);
    }

    #[test]
    fn an_object_whose_run_is_going_counts_as_creating_until_its_end_is_recorded() {
        let o = Outcomes::default();
        o.record("f", "ns/a".into(), failed("before", 1));
        o.running("f", "ns/a", None);
        o.running("f", "ns/new", Some("h2".into()));
        let refused = [("ns/new".to_string(), "old refusal".to_string())];
        let s = o.summary("f", &refused);
        assert_eq!((s.objects, s.creating, s.running, s.failed), (2, 2, 0, 0));
        o.record(
            "f",
            "ns/a".into(),
            Some(Outcome {
                failure: None,
                at: 2,
                revision: None,
            }),
        );
        o.record("f", "ns/new".into(), failed("now", 3));
        let s = o.summary("f", &[]);
        assert_eq!((s.objects, s.creating, s.running, s.failed), (2, 0, 1, 1));
        o.running("f", "ns/gone", None);
        o.record("f", "ns/gone".into(), None);
        assert_eq!(
            o.summary("f", &[]).objects,
            2,
            "an object that left is not counted"
        );
    }
}

#[cfg(test)]
mod revision_tests {
    use super::*;

    #[test]
    fn objects_are_counted_per_the_revision_that_last_served_them_until_they_leave() {
        let o = Outcomes::default();
        let served = |revision: Option<&str>| {
            Some(Outcome {
                failure: None,
                at: 1,
                revision: revision.map(String::from),
            })
        };
        o.record("f", "ns/a".into(), served(Some("h1")));
        o.record("f", "ns/b".into(), served(Some("h2")));
        o.record("f", "ns/c".into(), served(Some("h2")));
        o.record("f", "ns/old".into(), served(None));
        o.record("g", "ns/x".into(), served(Some("h1")));
        let want: BTreeMap<String, u32> = [("h1".into(), 1), ("h2".into(), 2)].into();
        assert_eq!(o.by_revision("f"), want);
        o.record("f", "ns/a".into(), served(Some("h2")));
        o.record("f", "ns/c".into(), None);
        let want: BTreeMap<String, u32> = [("h2".into(), 2)].into();
        assert_eq!(o.by_revision("f"), want);
    }

    #[test]
    fn a_rollout_sees_each_object_on_the_revision_it_last_ran_or_runs_now() {
        let o = Outcomes::default();
        let ended = |failure: Option<&str>, revision: &str| {
            Some(Outcome {
                failure: failure.map(String::from),
                at: 7,
                revision: Some(revision.into()),
            })
        };
        o.record("f", "ns/a".into(), ended(None, "h1"));
        o.record("f", "ns/b".into(), ended(Some("boom"), "h2"));
        o.record("f", "ns/c".into(), ended(None, "h1"));
        o.running("f", "ns/c", Some("h2".into()));
        o.running("f", "ns/new", Some("h2".into()));
        let got: Vec<(String, Option<String>, LatestRun)> = o
            .records("f")
            .into_iter()
            .map(|r| (r.key, r.revision, r.state))
            .collect();
        let h = |s: &str| Some(s.to_string());
        assert_eq!(
            got,
            [
                ("ns/a".into(), h("h1"), LatestRun::Ready(7)),
                ("ns/b".into(), h("h2"), LatestRun::Failed),
                ("ns/c".into(), h("h2"), LatestRun::Running),
                ("ns/new".into(), h("h2"), LatestRun::Running),
            ]
        );
        assert!(o.records("g").is_empty());
        let listed: BTreeSet<String> = ["ns/a".to_string()].into();
        o.retain("f", &listed);
        let keys: Vec<String> = o.records("f").into_iter().map(|r| r.key).collect();
        assert_eq!(
            keys,
            ["ns/a", "ns/c", "ns/new"],
            "those running stay until they end"
        );
    }
}

#[cfg(test)]
mod schedule_tests {
    use super::*;

    fn at(name: &str, due: i64) -> Schedule {
        Schedule {
            object: ("ns".into(), name.into()),
            uid: format!("u-{name}"),
            failures: 1,
            due,
            trigger: serde_json::json!({}),
            mark: String::new(),
            held: 0,
        }
    }

    #[test]
    fn due_objects_are_listed_and_the_next_one_is_named_until_they_leave() {
        let o = Outcomes::default();
        o.schedule("f", "ns/a", Some(at("a", 10)));
        o.schedule("f", "ns/b", Some(at("b", 20)));
        o.schedule("f", "ns/c", Some(at("c", 30)));
        o.schedule("g", "ns/x", Some(at("x", 1)));
        let hold: &dyn Fn(u32) -> i64 = &|_| 100;
        let a = vec![("ns".to_string(), "a".to_string())];
        assert_eq!(o.due("f", 15, Some(hold)), (a, Some(20)));
        assert_eq!(
            o.due("f", 15, None),
            (vec![], Some(20)),
            "held after handed out"
        );
        assert_eq!(o.due("f", 115, None).0.len(), 3, "until its hold ends");
        o.schedule("f", "ns/a", None);
        o.record("f", "ns/b".into(), None);
        assert_eq!(o.due("f", 15, None), (vec![], Some(30)));
        assert_eq!(o.scheduled("f", "ns/c").map(|s| s.due), Some(30));
        o.forget("f");
        assert_eq!(o.due("f", 100, None), (vec![], None));
        assert_eq!(o.due("g", 100, None).0.len(), 1);
    }
}
