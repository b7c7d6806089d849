//! The records a rollout plans from for a flow recorded in child flows (`record: Child`): each
//! child as the summary lists it (`crate::bind::pages::child_state`): the revision its spec was
//! made from, and its latest run — counted on that revision only once that run is for its spec
//! as it is (a child just re-made still shows its previous run's end). Kept from one summary
//! to the next reconcile (one small entry per object, replaced whole at each summary), so a
//! reconcile plans without listing every child again. Pure but for that memory.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::DynamicObject;

use super::plan::{LatestRun, Record};

/// Each child's record for the planner, from the children's states (object key, state).
pub fn records(states: &[(String, DynamicObject)]) -> Vec<Record> {
    let mut out: Vec<Record> = states
        .iter()
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, c)| {
            let st = &c.data["status"];
            let current = c.data["generation"].as_i64().is_some()
                && c.data["generation"] == st["run"]["generation"];
            let ended = st["run"]["finishedAt"].as_str();
            let at = ended
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(|t| t.as_second());
            let state = match (current, st["phase"].as_str(), at) {
                (true, Some("Succeeded"), Some(at)) => LatestRun::Ready(at),
                (true, Some("Failed" | "Aborted"), _) => LatestRun::Failed,
                _ => LatestRun::Running,
            };
            Record {
                key: key.clone(),
                revision: c.data["revision"].as_str().map(String::from),
                state,
            }
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// The records of every bound flow recorded in child flows, by flow uid, as its last summary
/// listed them.
#[derive(Default)]
pub struct Kept(Mutex<HashMap<String, Vec<Record>>>);

impl Kept {
    /// Flow `uid`'s records as last listed (None: not listed since this process started).
    pub fn get(&self, uid: &str) -> Option<Vec<Record>> {
        self.0.lock().expect("not poisoned").get(uid).cloned()
    }

    /// Keeps flow `uid`'s records.
    pub fn put(&self, uid: &str, records: Vec<Record>) {
        self.0
            .lock()
            .expect("not poisoned")
            .insert(uid.into(), records);
    }

    /// Forgets flow `uid` (released).
    pub fn forget(&self, uid: &str) {
        self.0.lock().expect("not poisoned").remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state(generation: i64, run: i64, phase: &str) -> DynamicObject {
        serde_json::from_value(
            json!({"metadata": {}, "revision": "R", "generation": generation,
            "status": {"phase": phase, "run": {"generation": run,
                "finishedAt": "2026-01-01T00:00:10Z"}}}),
        )
        .unwrap()
    }

    #[test]
    fn a_child_counts_as_served_by_its_revision_only_once_its_run_is_for_its_spec() {
        let states = vec![
            ("ns/b".to_string(), state(2, 2, "Succeeded")),
            ("ns/a".to_string(), state(3, 2, "Succeeded")),
            ("ns/c".to_string(), state(2, 2, "Failed")),
            ("ns/d".to_string(), state(2, 2, "Running")),
        ];
        let r = records(&states);
        let got: Vec<(&str, LatestRun)> = r.iter().map(|r| (r.key.as_str(), r.state)).collect();
        let at = 1_767_225_610;
        assert_eq!(
            got,
            [
                ("ns/a", LatestRun::Running),
                ("ns/b", LatestRun::Ready(at)),
                ("ns/c", LatestRun::Failed),
                ("ns/d", LatestRun::Running)
            ]
        );
        assert!(r.iter().all(|r| r.revision.as_deref() == Some("R")));
    }
}
