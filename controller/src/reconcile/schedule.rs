//! Whether a reconcile starts a run: `spec.suspend`, `spec.schedule` and, for a scheduled flow,
//! which slot is due (docs/schedules.md). Pure: the reconcile builds the run it names and writes
//! the times into status. As CronJob does, missed slots (a controller that was down) collapse
//! into one catch-up run for the latest of them, which does not start when it is older than
//! `startingDeadlineSeconds`; `status.lastScheduleTime` is what says which slots were served.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use pseudoflow_crd::schedule::Schedule;
use pseudoflow_crd::{
    ConcurrencyPolicy, FlowPhase, PseudoFlowSpec, PseudoFlowStatus, RUN_ANNOTATION,
};
use serde_json::Value;

use super::Reconcile;
use crate::flow::status::time;
use pseudoflow_walk::{RunPhase, StoredRun};

/// The slot a schedule wants started now, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotDue {
    /// Start a run for this slot.
    Start(i64),
    /// This slot was missed by more than `startingDeadlineSeconds`: it does not start.
    TooLate(i64),
    /// No slot since the last one served.
    Wait,
}

/// The due slot: the latest slot after `last` (or after the flow's creation), up to `now`.
pub fn due(
    s: &Schedule,
    last: Option<i64>,
    created: i64,
    now: i64,
    deadline: Option<u32>,
) -> SlotDue {
    let since = last.unwrap_or(created);
    match s.latest_until(now) {
        Some(slot) if slot > since => match deadline {
            Some(d) if now - slot > i64::from(d) => SlotDue::TooLate(slot),
            _ => SlotDue::Start(slot),
        },
        _ => SlotDue::Wait,
    }
}

/// What this reconcile does about new runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleDecision {
    /// Start a new run with this trigger; `None`: only drive the stored run, if any.
    pub start: Option<Option<String>>,
    /// `status.lastScheduleTime` after this reconcile.
    pub last: Option<i64>,
    /// `status.nextScheduleTime` (none while suspended).
    pub next: Option<i64>,
    /// A due slot not started because a run is active under `concurrencyPolicy: Forbid`.
    pub skipped: Option<i64>,
    /// A due slot not started because it is older than `startingDeadlineSeconds` (the
    /// controller was down, or the API unreachable, past it): recorded as served, not run.
    pub missed: Option<i64>,
}

/// Decides from the spec, the run annotation's value, whether the stored run is still running,
/// the last slot served (from status), the flow's creation and now.
pub fn decide(
    spec: &PseudoFlowSpec,
    trigger: Option<String>,
    running: bool,
    last: Option<i64>,
    created: i64,
    now: i64,
) -> ScheduleDecision {
    if spec.include_only {
        // A library for includeFlow: it never runs on its own.
        return ScheduleDecision::default();
    }
    let schedule = match spec.parsed_schedule() {
        None if spec.suspend => return ScheduleDecision::default(),
        None => {
            return ScheduleDecision {
                start: Some(trigger),
                ..ScheduleDecision::default()
            }
        }
        // The validator rejects a schedule that does not parse; nothing starts from one.
        Some(Err(_)) => return ScheduleDecision::default(),
        Some(Ok(s)) => s,
    };
    let mut d = ScheduleDecision {
        last,
        ..ScheduleDecision::default()
    };
    if spec.suspend {
        return d;
    }
    d.next = schedule.next_after(now);
    match due(
        &schedule,
        last,
        created,
        now,
        spec.starting_deadline_seconds,
    ) {
        SlotDue::Start(slot) => {
            d.last = Some(slot);
            if running && spec.options.concurrency_policy == ConcurrencyPolicy::Forbid {
                d.skipped = Some(slot);
            } else {
                d.start = Some(Some(format!("schedule {}", time(slot).0)));
            }
        }
        SlotDue::TooLate(slot) => {
            // Served, so it is told once, not at every reconcile until the next slot.
            d.last = Some(slot);
            d.missed = Some(slot);
        }
        SlotDue::Wait => {}
    }
    d
}

/// [`decide`] for `flow` as it is now, given its stored run and its last status. A flow being
/// deleted always starts its `onDelete` run, whatever its schedule or `suspend` say.
pub fn for_flow(
    r: &Reconcile<'_>,
    spec: &PseudoFlowSpec,
    stored: Option<&StoredRun>,
    previous: &Value,
    deleting: bool,
) -> ScheduleDecision {
    let (flow, now) = (r.flow, r.now);
    let trigger = flow.annotations().get(RUN_ANNOTATION).cloned();
    // A run stored before runs kept their spec, of an older generation, is never driven again
    // (reconcile/mod.rs waits for its Jobs only): it does not hold a slot back under Forbid.
    let generation = flow.metadata.generation.unwrap_or(0);
    let stale = |s: &StoredRun| s.spec.is_none() && s.generation != generation;
    let running = stored.is_some_and(|s| s.state.phase == RunPhase::Running && !stale(s));
    let created = flow.metadata.creation_timestamp.as_ref();
    let created = created.map_or(now, |t| t.0.as_second());
    let mut d = decide(
        spec,
        trigger.clone(),
        running,
        last_of(previous),
        created,
        now,
    );
    if deleting {
        d.start = Some(trigger);
    } else if d.start.is_none() {
        // A run asked for now on a scheduled flow (`kubectl pf run`): a new run annotation value.
        d.start = manual_run(spec, trigger, stored).map(Some);
    }
    d
}

/// The run annotation's value, if it asks a scheduled flow (not suspended, not a library) for a
/// run now, as `kubectl create job --from` does for a CronJob: a value neither the stored run
/// started from nor saw when it started (a retry keeps its run's). Every run records the value it
/// saw, so each value starts one run; with no run yet, any value does. An unscheduled flow's
/// value is its runs' trigger already ([`decide`]).
pub fn manual_run(
    spec: &PseudoFlowSpec,
    trigger: Option<String>,
    stored: Option<&StoredRun>,
) -> Option<String> {
    let scheduled = matches!(spec.parsed_schedule(), Some(Ok(_)));
    if !scheduled || spec.suspend || spec.include_only {
        return None;
    }
    let value = trigger?;
    let seen = stored.is_some_and(|s| {
        s.run_token.as_deref() == Some(value.as_str()) || s.trigger.as_deref() == Some(&value)
    });
    (!seen).then_some(value)
}

impl ScheduleDecision {
    /// The Event note for a slot missed past `startingDeadlineSeconds`, if one was.
    pub fn missed_note(&self, deadline: Option<u32>) -> Option<String> {
        let slot = self.missed?;
        Some(format!(
            "slot {} not started: more than startingDeadlineSeconds ({}s) late",
            time(slot).0,
            deadline.unwrap_or_default()
        ))
    }

    /// The Event note for a slot skipped under Forbid, if one was.
    pub fn skipped_note(&self) -> Option<String> {
        let slot = self.skipped?;
        Some(format!(
            "slot {} skipped: a run is active (concurrencyPolicy Forbid)",
            time(slot).0
        ))
    }
}

/// `status.lastScheduleTime` as unix seconds.
pub fn last_of(previous: &Value) -> Option<i64> {
    previous["lastScheduleTime"]
        .as_str()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map(|t| t.as_second())
}

/// Writes the decision's times into a status.
pub fn stamp(status: &mut PseudoFlowStatus, d: &ScheduleDecision) {
    status.last_schedule_time = d.last.map(time);
    status.next_schedule_time = d.next.map(time);
}

/// Why a flow with no run is `Pending` (`status.reason`): each is settled, nothing is under way,
/// so GitOps health reads it as Healthy rather than waiting forever (docs/gitops.md).
pub mod idle_reason {
    /// A library for `includeFlow` (`spec.includeOnly`): it never runs on its own.
    pub const INCLUDE_ONLY: &str = "IncludeOnly";
    /// Created (or left) suspended before any run: no run starts while `spec.suspend` is true.
    pub const SUSPENDED: &str = "Suspended";
    /// A scheduled flow before its first slot.
    pub const WAITING_FOR_SCHEDULE: &str = "WaitingForSchedule";
    /// A scheduled flow whose schedule has no further slot.
    pub const SCHEDULE_ENDED: &str = "ScheduleEnded";
}

/// Status of a flow with no run at all yet: a library, suspended, or waiting for its first slot;
/// its reason says which (see [`idle_reason`]).
pub fn idle(spec: &PseudoFlowSpec, d: &ScheduleDecision, generation: i64) -> PseudoFlowStatus {
    let (reason, message) = match d.next {
        _ if spec.include_only => (
            idle_reason::INCLUDE_ONLY,
            "included only: its steps run in the flows that include it (includeFlow), never on their own"
                .to_string(),
        ),
        _ if spec.suspend => (
            idle_reason::SUSPENDED,
            "suspended: no run starts while spec.suspend is true".to_string(),
        ),
        Some(next) => (
            idle_reason::WAITING_FOR_SCHEDULE,
            format!("waiting for the schedule: next run at {}", time(next).0),
        ),
        None => (
            idle_reason::SCHEDULE_ENDED,
            "the schedule has no further slot".to_string(),
        ),
    };
    let mut status = PseudoFlowStatus {
        observed_generation: Some(generation),
        phase: Some(FlowPhase::Pending),
        reason: Some(reason.to_string()),
        message: Some(message),
        ..Default::default()
    };
    stamp(&mut status, d);
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-01-05T10:07:30Z.
    const NOW: i64 = 1_767_607_650;

    fn every_minute() -> Schedule {
        Schedule::parse("* * * * *", None).unwrap()
    }

    fn spec(schedule: Option<&str>, policy: ConcurrencyPolicy, suspend: bool) -> PseudoFlowSpec {
        let mut s: PseudoFlowSpec =
            serde_json::from_value(serde_json::json!({"steps": [{"type": "log", "message": "x"}]}))
                .unwrap();
        s.schedule = schedule.map(String::from);
        s.options.concurrency_policy = policy;
        s.suspend = suspend;
        s
    }

    #[test]
    fn nothing_is_due_before_the_first_slot_after_creation() {
        let s = every_minute();
        assert_eq!(due(&s, None, NOW - 20, NOW, None), SlotDue::Wait);
        assert_eq!(due(&s, None, NOW - 31, NOW, None), SlotDue::Start(NOW - 30));
    }

    #[test]
    fn missed_slots_collapse_into_one_run_for_the_latest() {
        let s = every_minute();
        // Down for ten minutes: one run, for the latest slot, not ten.
        let last = NOW - 30 - 600;
        assert_eq!(due(&s, Some(last), 0, NOW, None), SlotDue::Start(NOW - 30));
        // Once served, nothing more is due until the next slot.
        assert_eq!(due(&s, Some(NOW - 30), 0, NOW, None), SlotDue::Wait);
    }

    #[test]
    fn a_slot_older_than_the_starting_deadline_does_not_start() {
        let s = every_minute();
        assert_eq!(
            due(&s, Some(0), 0, NOW, Some(10)),
            SlotDue::TooLate(NOW - 30)
        );
        assert_eq!(due(&s, Some(0), 0, NOW, Some(30)), SlotDue::Start(NOW - 30));
    }

    #[test]
    fn a_missed_slot_is_served_without_a_run_and_told_once() {
        let mut flow = spec(Some("* * * * *"), ConcurrencyPolicy::Allow, false);
        flow.starting_deadline_seconds = Some(10);
        let d = decide(&flow, None, false, Some(0), 0, NOW);
        assert_eq!(d.start, None);
        assert_eq!((d.last, d.missed), (Some(NOW - 30), Some(NOW - 30)));
        assert!(d.missed_note(Some(10)).unwrap().contains("(10s) late"));
        // The next reconcile before the next slot: served already, nothing more to tell.
        let again = decide(&flow, None, false, d.last, 0, NOW + 5);
        assert_eq!((again.start, again.missed), (None, None));
    }

    #[test]
    fn an_unscheduled_flow_starts_the_run_its_spec_and_annotation_want() {
        let d = decide(
            &spec(None, ConcurrencyPolicy::Allow, false),
            Some("t1".into()),
            true,
            None,
            0,
            NOW,
        );
        assert_eq!(d.start, Some(Some("t1".into())));
        assert_eq!((d.last, d.next), (None, None));
    }

    #[test]
    fn suspend_starts_nothing_scheduled_or_not() {
        for schedule in [None, Some("* * * * *")] {
            let d = decide(
                &spec(schedule, ConcurrencyPolicy::Allow, true),
                None,
                false,
                Some(0),
                0,
                NOW,
            );
            assert_eq!(d.start, None, "{schedule:?}");
            assert_eq!(d.next, None);
        }
    }

    #[test]
    fn a_due_slot_starts_a_run_named_after_it_and_is_recorded() {
        let d = decide(
            &spec(Some("* * * * *"), ConcurrencyPolicy::Allow, false),
            None,
            true,
            Some(0),
            0,
            NOW,
        );
        assert_eq!(d.start, Some(Some("schedule 2026-01-05T10:07:00Z".into())));
        assert_eq!(d.last, Some(NOW - 30));
        assert_eq!(d.next, Some(NOW + 30));
        assert_eq!(d.skipped, None);
    }

    #[test]
    fn forbid_skips_a_slot_that_comes_while_a_run_is_active() {
        let s = spec(Some("* * * * *"), ConcurrencyPolicy::Forbid, false);
        let d = decide(&s, None, true, Some(0), 0, NOW);
        assert_eq!(
            (d.start.clone(), d.skipped, d.last),
            (None, Some(NOW - 30), Some(NOW - 30))
        );
        // Not running: the slot starts.
        let d = decide(&s, None, false, Some(0), 0, NOW);
        assert!(d.start.is_some() && d.skipped.is_none());
    }

    #[test]
    fn between_slots_only_the_stored_run_is_driven() {
        let s = spec(Some("* * * * *"), ConcurrencyPolicy::Replace, false);
        let d = decide(&s, Some("ignored".into()), true, Some(NOW - 30), 0, NOW);
        assert_eq!(d.start, None);
        assert_eq!(d.last, Some(NOW - 30));
    }

    #[test]
    fn a_new_run_value_starts_a_scheduled_flow_now_once() {
        let scheduled = spec(Some("* * * * *"), ConcurrencyPolicy::Allow, false);
        let v = || Some("now-1".to_string());
        assert_eq!(manual_run(&scheduled, v(), None), v(), "no run yet");
        assert_eq!(manual_run(&scheduled, None, None), None);
        let mut slot = StoredRun {
            trigger: Some("schedule 2026-01-05T10:07:00Z".into()),
            ..Default::default()
        };
        assert_eq!(manual_run(&scheduled, v(), Some(&slot)), v(), "new value");
        slot.run_token = v();
        assert_eq!(
            manual_run(&scheduled, v(), Some(&slot)),
            None,
            "seen when the slot's run started"
        );
        let manual = StoredRun {
            trigger: v(),
            ..Default::default()
        };
        assert_eq!(
            manual_run(&scheduled, v(), Some(&manual)),
            None,
            "its own run"
        );
        let suspended = spec(Some("* * * * *"), ConcurrencyPolicy::Allow, true);
        assert_eq!(manual_run(&suspended, v(), None), None);
        let unscheduled = spec(None, ConcurrencyPolicy::Allow, false);
        assert_eq!(manual_run(&unscheduled, v(), None), None, "decide() has it");
    }

    #[test]
    fn an_idle_flow_says_why_it_is_pending() {
        let idle_of = |s: &PseudoFlowSpec, next: Option<i64>| {
            let d = ScheduleDecision {
                start: None,
                last: None,
                next,
                skipped: None,
                missed: None,
            };
            let st = idle(s, &d, 3);
            assert_eq!(st.phase, Some(FlowPhase::Pending));
            assert_eq!(st.observed_generation, Some(3));
            st.reason.unwrap()
        };
        let mut library = spec(None, ConcurrencyPolicy::Allow, false);
        library.include_only = true;
        assert_eq!(idle_of(&library, None), idle_reason::INCLUDE_ONLY);
        let suspended = spec(Some("* * * * *"), ConcurrencyPolicy::Allow, true);
        assert_eq!(idle_of(&suspended, None), idle_reason::SUSPENDED);
        let scheduled = spec(Some("* * * * *"), ConcurrencyPolicy::Allow, false);
        assert_eq!(
            idle_of(&scheduled, Some(NOW)),
            idle_reason::WAITING_FOR_SCHEDULE
        );
        assert_eq!(idle_of(&scheduled, None), idle_reason::SCHEDULE_ENDED);
    }

    #[test]
    fn last_schedule_time_is_read_back_from_status() {
        let status = serde_json::json!({"lastScheduleTime": "2026-01-05T10:07:00Z"});
        assert_eq!(last_of(&status), Some(NOW - 30));
        assert_eq!(last_of(&Value::Null), None);
    }
}
