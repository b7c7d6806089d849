//! Which run a reconcile drives: the stored one, a new one, or the stored one with the new one
//! queued — from the stored run, the run the flow wants now, `concurrencyPolicy` and whether the
//! flow is being deleted. Pure: the reconcile aborts the runs named here and saves the result.

use pseudoflow_compiler::names::run_id;
use pseudoflow_crd::ConcurrencyPolicy;

use super::{RunPhase, StopCause, StoredRun};

/// The run a flow object wants now: `run_id` over (uid, generation, run annotation), prefixed
/// with `d` for the `onDelete` run so its Jobs never collide with the last run's.
pub fn wanted_id(uid: &str, generation: i64, trigger: Option<&str>, deleting: bool) -> String {
    let id = run_id(uid, generation, trigger);
    if deleting {
        format!("d{id}")
    } else {
        id
    }
}

/// What [`select`] decided.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The run to drive now.
    pub run: StoredRun,
    /// Running runs to stop first (their Jobs deleted): replaced, or stopped by deletion.
    pub aborted: Vec<String>,
    /// `concurrencyPolicy: Forbid`: the id of the wanted run, waiting for [`Selection::run`]
    /// to end.
    pub queued: Option<String>,
}

/// Chooses the run to drive. `wanted` is the run the flow wants now, as it would start
/// (see [`wanted_id`]); `stored` is this flow object's stored run, if any.
pub fn select(
    stored: Option<StoredRun>,
    wanted: StoredRun,
    policy: ConcurrencyPolicy,
    deleting: bool,
) -> Selection {
    let drive = |run| Selection {
        run,
        aborted: Vec::new(),
        queued: None,
    };
    let Some(mut old) = stored else {
        return drive(wanted);
    };
    if is_wanted_run(&old, &wanted, deleting) {
        return drive(old);
    }
    if !deleting && only_suspend_changed(&old, &wanted) {
        // Suspending or resuming is not a new spec: the run holds, then goes on where it
        // stopped (or, ended, stays ended), now for the flow's current generation.
        old.generation = wanted.generation;
        return drive(old);
    }
    let replace = |old: &StoredRun, mut new: StoredRun, cause| {
        new.previous = old.history_after(cause, new.started_at);
        Selection {
            run: new,
            aborted: running_runs(old),
            queued: None,
        }
    };
    if deleting {
        // Deletion stops every running run before the onDelete steps start.
        return replace(&old, wanted, StopCause::Deleted);
    }
    if old.state.phase != RunPhase::Running {
        // The last run ended; Allow runs still going beside it keep going.
        let mut new = wanted;
        new.beside = std::mem::take(&mut old.beside);
        new.previous = old.history_after(StopCause::Replaced, new.started_at);
        return drive(new);
    }
    match policy {
        ConcurrencyPolicy::Forbid => {
            // Keep the running run; the new one waits (status.queuedRun) until it ends.
            let queued = Some(wanted.run_id);
            Selection {
                run: old,
                aborted: Vec::new(),
                queued,
            }
        }
        ConcurrencyPolicy::Replace => replace(&old, wanted, StopCause::Replaced),
        ConcurrencyPolicy::Allow => {
            // The running run goes on beside the new one.
            let mut new = wanted;
            new.beside = std::mem::take(&mut old.beside);
            new.previous = std::mem::take(&mut old.previous);
            new.beside.push(old);
            drive(new)
        }
    }
}

/// Ids of the runs of `stored` still running: itself and those beside it.
fn running_runs(stored: &StoredRun) -> Vec<String> {
    std::iter::once(stored)
        .chain(&stored.beside)
        .filter(|r| r.state.phase == RunPhase::Running)
        .map(|r| r.run_id.clone())
        .collect()
}

/// Whether `wanted` differs from the stored run only in `spec.suspend` (same trigger).
fn only_suspend_changed(stored: &StoredRun, wanted: &StoredRun) -> bool {
    let without_suspend = |spec: &Option<serde_json::Value>| {
        spec.as_ref().map(|s| {
            let mut s = s.clone();
            if let Some(m) = s.as_object_mut() {
                m.remove("suspend");
            }
            s
        })
    };
    stored.trigger == wanted.trigger
        && !stored.run_id.starts_with('d')
        && stored.spec.is_some()
        && without_suspend(&stored.spec) == without_suspend(&wanted.spec)
}

/// Whether the stored run (already known to be this flow object's) is the one wanted now: its
/// id says so, or it was started by the same generation and trigger under the id scheme of an
/// older controller (before run ids covered the uid), so that upgrading the controller does not
/// re-run every flow.
pub fn is_wanted_run(stored: &StoredRun, wanted: &StoredRun, deleting: bool) -> bool {
    stored.run_id == wanted.run_id
        || (stored.generation == wanted.generation
            && stored.trigger == wanted.trigger
            && stored.run_id.starts_with('d') == deleting)
}

#[cfg(test)]
mod tests {
    use pseudoflow_crd::status::MAX_PREVIOUS_RUNS;
    use pseudoflow_crd::FlowPhase;

    use super::*;

    fn run(id: &str, generation: i64, trigger: Option<&str>) -> StoredRun {
        StoredRun {
            run_id: id.into(),
            generation,
            trigger: trigger.map(String::from),
            ..Default::default()
        }
    }

    fn ended(mut r: StoredRun, phase: RunPhase) -> StoredRun {
        r.state.phase = phase;
        r
    }

    fn ids(runs: &[StoredRun]) -> Vec<&str> {
        runs.iter().map(|r| r.run_id.as_str()).collect()
    }

    const POLICIES: [ConcurrencyPolicy; 3] = [
        ConcurrencyPolicy::Allow,
        ConcurrencyPolicy::Forbid,
        ConcurrencyPolicy::Replace,
    ];

    #[test]
    fn the_first_run_starts_whatever_the_policy() {
        for policy in POLICIES {
            let s = select(None, run("r2", 2, None), policy, false);
            assert_eq!(s.run.run_id, "r2");
            assert!(s.aborted.is_empty() && s.queued.is_none());
        }
    }

    #[test]
    fn the_wanted_run_stored_is_driven_on_whatever_the_policy() {
        for policy in POLICIES {
            let mut stored = run("r1", 1, None);
            stored.vars.insert("kept".into(), 1.into());
            let s = select(Some(stored), run("r1", 1, None), policy, false);
            assert_eq!(s.run.vars["kept"], 1, "{policy:?}");
            assert!(s.aborted.is_empty() && s.queued.is_none());
        }
    }

    #[test]
    fn forbid_keeps_the_running_run_and_queues_the_wanted_one() {
        let s = select(
            Some(run("r1", 1, None)),
            run("r2", 2, None),
            ConcurrencyPolicy::Forbid,
            false,
        );
        assert_eq!(s.run.run_id, "r1");
        assert_eq!(s.queued.as_deref(), Some("r2"));
        assert!(s.aborted.is_empty());
    }

    #[test]
    fn replace_aborts_the_running_run_and_those_beside_it() {
        let mut old = run("r2", 2, None);
        old.beside = vec![
            run("r1", 1, None),
            ended(run("r0", 0, None), RunPhase::Failed),
        ];
        let s = select(
            Some(old),
            run("r3", 3, None),
            ConcurrencyPolicy::Replace,
            false,
        );
        assert_eq!(s.run.run_id, "r3");
        assert_eq!(s.aborted, ["r2", "r1"]);
        assert!(s.run.beside.is_empty() && s.queued.is_none());
    }

    fn history(run: &StoredRun) -> Vec<(&str, FlowPhase, &str)> {
        run.previous
            .iter()
            .map(|e| (e.run_id.as_str(), e.phase, e.reason.as_str()))
            .collect()
    }

    #[test]
    fn a_replaced_run_is_kept_in_the_history_as_aborted_and_an_ended_one_as_it_ended() {
        let mut old = run("r2", 2, None);
        old.started_at = 20;
        let mut beside = ended(run("r1", 1, None), RunPhase::Failed);
        beside.started_at = 10;
        beside.finished_at = Some(15);
        old.beside = vec![beside];
        let mut new = run("r3", 3, None);
        new.started_at = 30;
        let s = select(Some(old), new, ConcurrencyPolicy::Replace, false);
        assert_eq!(
            history(&s.run),
            [
                ("r2", FlowPhase::Aborted, "Replaced"),
                ("r1", FlowPhase::Failed, "StepFailed")
            ]
        );
        // Stopped when the new run started; an ended run keeps its own end.
        assert_eq!(s.run.previous[0].finished_at, Some(30));
        assert_eq!(s.run.previous[1].finished_at, Some(15));

        // The next run after r3 ended keeps r3 first, then r3's history.
        let r3 = ended(s.run, RunPhase::Succeeded);
        let s = select(
            Some(r3),
            run("r4", 4, None),
            ConcurrencyPolicy::Forbid,
            false,
        );
        assert_eq!(
            history(&s.run)[0..2],
            [
                ("r3", FlowPhase::Succeeded, "Succeeded"),
                ("r2", FlowPhase::Aborted, "Replaced")
            ]
        );
    }

    #[test]
    fn deletion_records_the_run_it_stops_as_aborted_for_the_deletion() {
        let s = select(
            Some(run("r1", 1, None)),
            run("dr1", 1, None),
            ConcurrencyPolicy::Allow,
            true,
        );
        assert_eq!(history(&s.run), [("r1", FlowPhase::Aborted, "Deleted")]);
    }

    #[test]
    fn the_history_is_bounded() {
        let mut last = ended(run("r0", 0, None), RunPhase::Succeeded);
        for i in 1..20 {
            let next = run(&format!("r{i}"), i, None);
            last = ended(
                select(Some(last), next, ConcurrencyPolicy::Replace, false).run,
                RunPhase::Succeeded,
            );
        }
        assert_eq!(last.previous.len(), MAX_PREVIOUS_RUNS);
        assert_eq!(last.previous[0].run_id, "r18");
    }

    #[test]
    fn allow_starts_the_wanted_run_with_the_running_ones_beside_it() {
        let mut old = run("r2", 2, None);
        old.beside = vec![run("r1", 1, None)];
        let s = select(
            Some(old),
            run("r3", 3, None),
            ConcurrencyPolicy::Allow,
            false,
        );
        assert_eq!(s.run.run_id, "r3");
        assert_eq!(ids(&s.run.beside), ["r1", "r2"]);
        assert!(s.run.beside.iter().all(|r| r.beside.is_empty()));
        assert!(s.aborted.is_empty() && s.queued.is_none());
    }

    #[test]
    fn after_an_ended_run_the_wanted_one_starts_and_runs_beside_it_go_on() {
        for policy in POLICIES {
            let mut old = ended(run("r2", 2, None), RunPhase::Succeeded);
            old.beside = vec![run("r1", 1, None)];
            let s = select(Some(old), run("r3", 3, None), policy, false);
            assert_eq!(s.run.run_id, "r3");
            assert_eq!(ids(&s.run.beside), ["r1"], "{policy:?}");
            assert!(s.aborted.is_empty() && s.queued.is_none());
        }
    }

    #[test]
    fn deletion_aborts_every_running_run_and_starts_the_on_delete_run() {
        for policy in POLICIES {
            let mut old = run("r2", 2, None);
            old.beside = vec![run("r1", 1, None)];
            let s = select(Some(old), run("dr2", 2, None), policy, true);
            assert_eq!(s.run.run_id, "dr2");
            assert_eq!(s.aborted, ["r2", "r1"], "{policy:?}");
            assert!(s.run.beside.is_empty() && s.queued.is_none());
        }
        let finished = ended(run("r2", 2, None), RunPhase::Succeeded);
        let s = select(
            Some(finished),
            run("dr2", 2, None),
            ConcurrencyPolicy::Allow,
            true,
        );
        assert!(s.aborted.is_empty(), "nothing was running");
    }

    #[test]
    fn the_on_delete_run_ids_differ_from_the_run_ids() {
        let id = wanted_id("uid", 3, Some("again"), false);
        assert_eq!(wanted_id("uid", 3, Some("again"), true), format!("d{id}"));
        assert_ne!(wanted_id("uid", 4, Some("again"), false), id);
    }

    #[test]
    fn a_run_stored_under_an_older_id_scheme_is_adopted_not_restarted() {
        let legacy = run("r15d9afd2", 3, Some("again"));
        let wanted = |generation, trigger: Option<&str>, id: &str| run(id, generation, trigger);
        assert!(is_wanted_run(
            &legacy,
            &wanted(3, Some("again"), "rabcdef01"),
            false
        ));
        assert!(
            !is_wanted_run(&legacy, &wanted(4, Some("again"), "rabcdef01"), false),
            "new generation"
        );
        assert!(
            !is_wanted_run(&legacy, &wanted(3, None, "rabcdef01"), false),
            "new trigger"
        );
        assert!(
            !is_wanted_run(&legacy, &wanted(3, Some("again"), "drabcdef01"), true),
            "deletion"
        );
        let on_delete = run("dr15d9afd2", 3, None);
        assert!(is_wanted_run(
            &on_delete,
            &wanted(3, None, "drabcdef01"),
            true
        ));
    }

    #[test]
    fn suspending_or_resuming_keeps_the_run_and_any_other_spec_change_starts_a_new_one() {
        let spec = |suspend: bool, image: &str| {
            Some(
                serde_json::json!({"suspend": suspend, "steps": [{"type": "log", "message": image}]}),
            )
        };
        let with_spec = |mut r: StoredRun, s| {
            r.spec = s;
            r
        };
        for policy in POLICIES {
            // Resumed while it runs: the held run goes on, for the new generation.
            let held = with_spec(run("r1", 1, None), spec(true, "a"));
            let s = select(
                Some(held),
                with_spec(run("r2", 2, None), spec(false, "a")),
                policy,
                false,
            );
            assert_eq!(
                (s.run.run_id.as_str(), s.run.generation),
                ("r1", 2),
                "{policy:?}"
            );
            assert!(s.aborted.is_empty() && s.queued.is_none(), "{policy:?}");
            // Resumed after it ended: no new run either.
            let done = ended(
                with_spec(run("r1", 1, None), spec(true, "a")),
                RunPhase::Succeeded,
            );
            let s = select(
                Some(done),
                with_spec(run("r2", 2, None), spec(false, "a")),
                policy,
                false,
            );
            assert_eq!(s.run.run_id, "r1", "{policy:?}");
            // A real change, made with the resume, is a new run.
            let done = ended(
                with_spec(run("r1", 1, None), spec(true, "a")),
                RunPhase::Succeeded,
            );
            let s = select(
                Some(done),
                with_spec(run("r2", 2, None), spec(false, "b")),
                policy,
                false,
            );
            assert_eq!(s.run.run_id, "r2", "{policy:?}");
        }
    }
}
