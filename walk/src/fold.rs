//! Folding what a step reported into its run, beside the walker's own bookkeeping: the variables
//! it set, whether an `onlyIfChanged` step has anything to do, and the run's deadline.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{split_instance_id, StoredRun};

/// Sets the step output `k`: `varPerNode` maps from several nodes merge; anything else is
/// replaced.
pub fn merge_var(vars: &mut BTreeMap<String, Value>, k: &str, v: Value) {
    match (vars.get_mut(k), v) {
        (Some(Value::Object(existing)), Value::Object(new)) => existing.extend(new),
        (_, v) => {
            vars.insert(k.to_string(), v);
        }
    }
}

/// `onlyIfChanged`: did an earlier step for this node instance's node change anything this run?
pub fn changed_on_same_node(run: &StoredRun, key: &[String]) -> bool {
    let Some(node_name) = key.last() else {
        return false;
    };
    run.state
        .instances
        .iter()
        .any(|(id, i)| i.changed && split_instance_id(id).1.last() == Some(node_name))
}

/// When the run must end (`options.timeoutSeconds` after it started), if it has a bound.
pub fn deadline(run: &StoredRun, timeout_seconds: Option<u32>) -> Option<i64> {
    timeout_seconds.map(|s| run.started_at + i64::from(s))
}

/// Why a run was stopped at its deadline (the message its failure records).
pub fn timed_out_message(timeout_seconds: u32) -> String {
    format!(
        "the run took longer than options.timeoutSeconds ({timeout_seconds}s); running steps were \
         stopped"
    )
}

/// The earlier of two optional wake-up times.
pub fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::instance_id;

    #[test]
    fn per_node_maps_merge_and_other_values_are_replaced() {
        let mut vars = BTreeMap::new();
        merge_var(&mut vars, "ips", json!({"a": "1"}));
        merge_var(&mut vars, "ips", json!({"b": "2"}));
        assert_eq!(vars["ips"], json!({"a": "1", "b": "2"}));
        merge_var(&mut vars, "ips", json!("flat"));
        assert_eq!(vars["ips"], json!("flat"));
        merge_var(&mut vars, "ips", json!({"c": "3"}));
        assert_eq!(vars["ips"], json!({"c": "3"}));
    }

    #[test]
    fn only_a_change_on_the_same_node_counts() {
        let mut run = StoredRun::default();
        let key = |n: &str| vec![n.to_string()];
        run.state.entry("s0-s0", &key("worker-0")).changed = true;
        run.state.entry("s0-s1", &key("worker-1"));
        assert!(changed_on_same_node(&run, &key("worker-0")));
        assert!(!changed_on_same_node(&run, &key("worker-1")));
        assert!(!changed_on_same_node(&run, &[]), "outside a node loop");
        assert!(run
            .state
            .instances
            .contains_key(&instance_id("s0-s0", &key("worker-0"))));
    }

    #[test]
    fn the_deadline_counts_from_the_start_of_the_run() {
        let run = StoredRun {
            started_at: 100,
            ..Default::default()
        };
        assert_eq!(deadline(&run, Some(30)), Some(130));
        assert_eq!(deadline(&run, None), None);
        assert_eq!(earliest(Some(5), Some(3)), Some(3));
        assert_eq!(earliest(None, Some(3)), Some(3));
        assert_eq!(earliest(None, None), None);
        assert!(timed_out_message(30).contains("(30s)"));
    }
}
