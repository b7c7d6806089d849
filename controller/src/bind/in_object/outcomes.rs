//! What the serves of a flow recorded in its objects saw, for the bound flow's `status.bound`
//! (there is no child to count): per object, whether its latest run failed and why. Kept in
//! memory, one small entry per object (its key and a failure message cut to 512 characters),
//! dropped when the object goes or the flow is released; after a restart, each object's entry
//! comes back from its own status at the next full pass.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use pseudoflow_crd::bind::MAX_FAILURES_SHOWN;
use pseudoflow_crd::status::{BoundFailure, BoundSummary};

/// One object's latest run: its failure (None: it succeeded) and when it ended (Unix seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Why it failed.
    pub failure: Option<String>,
    /// When it ended (newest failures are listed first).
    pub at: i64,
}

/// The outcomes of every flow recorded in its objects, by flow uid, then object key.
#[derive(Default)]
pub struct Outcomes(Mutex<HashMap<String, BTreeMap<String, Outcome>>>);

impl Outcomes {
    /// Records object `object`'s latest outcome for flow `flow` (None: the object left).
    pub fn record(&self, flow: &str, object: String, outcome: Option<Outcome>) {
        let mut all = self.0.lock().expect("not poisoned");
        let of_flow = all.entry(flow.to_string()).or_default();
        match outcome {
            Some(mut o) => {
                o.failure = o.failure.map(|m| crate::limits::bounded(&m, 512));
                of_flow.insert(object, o);
            }
            None => {
                of_flow.remove(&object);
            }
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
    }

    /// The summary of flow `flow`'s objects, with `refused` (object, why) counted as failed.
    pub fn summary(&self, flow: &str, refused: &[(String, String)]) -> BoundSummary {
        let all = self.0.lock().expect("not poisoned");
        let empty = BTreeMap::new();
        let of_flow = all.get(flow).unwrap_or(&empty);
        let mut s = BoundSummary::default();
        let mut failures: Vec<(i64, BoundFailure)> = Vec::new();
        for (object, o) in of_flow {
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
        let refusals = refused.iter().filter(|(o, _)| !of_flow.contains_key(o));
        s.objects = (of_flow.len() + refusals.clone().count()) as u32;
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
            },
        );
        assert_eq!(o.summary("f", &[]).failed, 2, "known: kept");
        o.record_if_unknown(
            "f",
            "ns/e",
            Outcome {
                failure: None,
                at: 5,
            },
        );
        assert_eq!(o.summary("f", &[]).running, 2, "unknown: recorded");
        o.record("f", "ns/e".into(), None);
        o.record("f", "ns/c".into(), None);
        assert_eq!(o.summary("f", &[]).objects, 2);
        o.forget("f");
        assert_eq!(o.summary("f", &[]), BoundSummary::default());
        assert_eq!(o.summary("g", &[]).failed, 1);
    }
}
