//! How a run starts: its state before anything ran, and the secret its journals are signed from.

use std::time::Duration;

use kube::runtime::controller::Action;
use serde_json::Value;

use pseudoflow_walk::StoredRun;

/// A run as it starts: nothing done yet, the spec it will be driven with kept.
pub fn new_run(
    id: &str,
    generation: i64,
    trigger: Option<String>,
    spec: &Value,
    t: i64,
) -> StoredRun {
    StoredRun {
        run_id: id.to_string(),
        generation,
        trigger,
        spec: Some(spec.clone()),
        started_at: t,
        ..Default::default()
    }
}

/// Gives `run` (and the runs beside it) a random secret where it has none; true when it did.
pub fn give_secrets(run: &mut StoredRun) -> bool {
    let mut gave = false;
    for r in run.beside.iter_mut() {
        if r.secret.is_empty() {
            r.secret = crate::secret::random_hex();
            gave = true;
        }
    }
    if run.secret.is_empty() {
        run.secret = crate::secret::random_hex();
        gave = true;
    }
    gave
}

/// Wakes the flow at `at` (unix seconds; at least a second from now), or on its next change.
pub fn requeue_at(at: Option<i64>, now: i64) -> Action {
    match at {
        Some(at) => Action::requeue(Duration::from_secs(
            u64::try_from((at - now).max(1)).unwrap_or(1),
        )),
        None => Action::await_change(),
    }
}
