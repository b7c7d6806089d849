//! A run is stored as one value, and the API server refuses one over 1 MiB. Saving such a run
//! would fail on every retry: no status, no timeout, the same Events again and again. So its
//! size is checked before it is saved: a run grown past [`MAX_RUN_STATE_BYTES`] ends Failed
//! (reason `RunStateTooLarge`) with a message naming its size and its biggest variable, and is
//! shrunk (variables first) until it can be stored.

use serde_json::Value;

use super::store::StoredRun;
use crate::limits::MAX_RUN_STATE_DEPTH;
use pseudoflow_walk::depth;
use pseudoflow_walk::RunPhase;

pub use pseudoflow_walk::RUN_STATE_TOO_LARGE;

/// What [`shrink_to_fit`] did to an oversized run.
#[derive(Debug, Clone, PartialEq)]
pub struct Oversized {
    /// Why, for status and Events.
    pub message: String,
    /// Runs (the run and those beside it) that were running and now ended: their Jobs must stop.
    pub stopped: Vec<String>,
}

fn len(v: &impl serde::Serialize) -> usize {
    serde_json::to_vec(v).map_or(usize::MAX, |b| b.len())
}

/// The biggest variable of `run` and the runs beside it, with its serialized size.
fn biggest_var(run: &StoredRun) -> Option<(String, usize)> {
    std::iter::once(run)
        .chain(&run.beside)
        .flat_map(|r| &r.vars)
        .map(|(k, v): (&String, &Value)| (k.clone(), len(v)))
        .max_by_key(|(_, n)| *n)
}

/// Why `run` cannot be stored (and read back): over `limit` bytes, or nested too deep.
fn unstorable(run: &StoredRun, limit: usize) -> Option<String> {
    let text = serde_json::to_string(run).unwrap_or_default();
    if text.len() > limit {
        let biggest = biggest_var(run)
            .map(|(name, n)| format!("; the biggest variable is {name} ({n} bytes)"))
            .unwrap_or_default();
        return Some(format!(
            "the run state is {} bytes, more than the limit of {limit} bytes{biggest}",
            text.len()
        ));
    }
    depth::check(&text, "runState", MAX_RUN_STATE_DEPTH)
        .err()
        .map(|e| format!("the run state cannot be stored: {e}"))
}

/// Leaves `run` alone when it can be stored: at most `limit` bytes and at most
/// [`MAX_RUN_STATE_DEPTH`] deep. Otherwise ends every running run in it as Failed and drops what
/// only a running run needs (variables, then fetched includes and kept specs, then runs beside
/// it, then settled step instances) until it can, and says why.
pub fn shrink_to_fit(run: &mut StoredRun, limit: usize) -> Option<Oversized> {
    let why = unstorable(run, limit)?;
    let message = format!("{why}; the run was stopped and its variables dropped");
    let mut stopped = Vec::new();
    let mut stop = |r: &mut StoredRun| {
        if r.state.phase == RunPhase::Running {
            r.state.end_failed(RUN_STATE_TOO_LARGE, &message);
            stopped.push(r.run_id.clone());
        }
    };
    stop(run);
    run.beside.iter_mut().for_each(stop);
    // Every run in it has ended: what follows is needed only to go on running.
    let steps: [fn(&mut StoredRun); 5] = [
        |r| {
            r.vars.clear();
            r.beside.iter_mut().for_each(|b| b.vars.clear());
        },
        |r| {
            r.includes.clear();
            r.spec = None;
            r.beside.iter_mut().for_each(|b| {
                b.includes.clear();
                b.spec = None;
            });
        },
        |r| r.beside.clear(),
        |r| {
            let failure = r.state.failure.as_ref().map(|(id, _)| id.clone());
            r.state
                .instances
                .retain(|id, i| !i.phase.settled() || Some(id) == failure.as_ref());
        },
        |r| r.state.instances.clear(),
    ];
    for step in steps {
        if unstorable(run, limit).is_none() {
            break;
        }
        step(run);
    }
    Some(Oversized { message, stopped })
}

/// Deletes the Jobs of the runs `stopped` (all of one flow, in `ns`).
pub async fn stop_jobs(
    client: &kube::Client,
    ns: &str,
    flow_uid: &str,
    stopped: &[String],
) -> kube::Result<()> {
    for id in stopped {
        // Only Jobs this flow owns: a run label alone never makes a Job deletable.
        super::observe::delete_owned_jobs(client, ns, flow_uid, &crate::labels::run_selector(id))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pseudoflow_walk::{Instance, Phase};
    use serde_json::json;

    fn run_with(vars: &[(&str, usize)]) -> StoredRun {
        let mut r = StoredRun {
            run_id: "r1".into(),
            spec: Some(json!({"steps": []})),
            ..Default::default()
        };
        for (name, n) in vars {
            r.vars.insert(name.to_string(), json!("x".repeat(*n)));
        }
        r.state.instances.insert(
            "s1".into(),
            Instance {
                phase: Phase::Running,
                ..Default::default()
            },
        );
        r
    }

    #[test]
    fn a_run_within_the_limit_is_left_alone() {
        let mut r = run_with(&[("a", 1000)]);
        let before = serde_json::to_value(&r).unwrap();
        assert_eq!(shrink_to_fit(&mut r, 10_000), None);
        assert_eq!(serde_json::to_value(&r).unwrap(), before);
    }

    #[test]
    fn an_oversized_run_ends_failed_naming_its_size_and_biggest_variable_and_then_fits() {
        let mut r = run_with(&[("small", 10), ("acc", 6000), ("other", 5000)]);
        let size = len(&r);
        let over = shrink_to_fit(&mut r, 10_000).unwrap();
        assert_eq!(over.stopped, ["r1"]);
        assert!(
            over.message
                .contains(&format!("the run state is {size} bytes")),
            "{}",
            over.message
        );
        assert!(
            over.message.contains("limit of 10000 bytes"),
            "{}",
            over.message
        );
        assert!(
            over.message.contains("acc (6002 bytes)"),
            "{}",
            over.message
        );
        assert_eq!(r.state.phase, RunPhase::Failed);
        assert_eq!(
            r.state.failure,
            Some((RUN_STATE_TOO_LARGE.to_string(), over.message.clone()))
        );
        assert_eq!(r.state.instances["s1"].phase, Phase::Aborted);
        assert!(r.vars.is_empty());
        assert!(len(&r) <= 10_000);
        assert!(r.spec.is_some(), "dropped only what was needed");
    }

    #[test]
    fn runs_beside_are_stopped_too_and_an_ended_run_only_shrinks() {
        let mut r = run_with(&[("a", 100)]);
        r.state.phase = RunPhase::Succeeded;
        r.state.instances.clear();
        let mut other = run_with(&[("big", 20_000)]);
        other.run_id = "r0".into();
        r.beside.push(other);
        let over = shrink_to_fit(&mut r, 10_000).unwrap();
        assert_eq!(over.stopped, ["r0"], "the ended run is not stopped again");
        assert_eq!(r.state.phase, RunPhase::Succeeded);
        assert_eq!(r.beside[0].state.phase, RunPhase::Failed);
        assert!(
            over.message.contains("big (20002 bytes)"),
            "{}",
            over.message
        );
        assert!(len(&r) <= 10_000);
    }

    #[test]
    fn a_variable_nested_too_deep_to_read_back_ends_the_run_naming_it() {
        let mut r = run_with(&[("fine", 10)]);
        let mut deep = json!(1);
        for _ in 0..MAX_RUN_STATE_DEPTH {
            deep = json!([deep]);
        }
        r.vars.insert("deep".into(), deep);
        let over = shrink_to_fit(&mut r, 1_000_000).unwrap();
        assert!(
            over.message.contains("runState.vars.deep[0]"),
            "{}",
            over.message
        );
        assert!(over.message.contains("100 levels"), "{}", over.message);
        assert_eq!(r.state.phase, RunPhase::Failed);
        assert!(r.vars.is_empty());
        let text = serde_json::to_string(&r).unwrap();
        assert!(serde_json::from_str::<StoredRun>(&text).is_ok());
    }

    #[test]
    fn a_spec_too_large_to_keep_is_dropped_once_the_run_ended() {
        let mut r = run_with(&[]);
        r.spec = Some(json!({"steps": [], "vars": {"x": "y".repeat(20_000)}}));
        let over = shrink_to_fit(&mut r, 10_000).unwrap();
        assert!(
            !over.message.contains("biggest variable"),
            "{}",
            over.message
        );
        assert_eq!(r.spec, None);
        assert!(len(&r) <= 10_000);
    }
}
