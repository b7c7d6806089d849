//! A rollout's plan told: `status.bound.rollout` (what `kubectl pf rollout status` and Argo CD
//! show) and the bound flow's Events when a wave starts (`RolloutWave`), when it stops
//! (`RolloutStopped`, naming the failing objects and the revision) and when it is done
//! (`RolloutCompleted`). Each Event is published when the status it tells differs from the one
//! last written, so a restarted controller does not tell again what was told. Object names
//! only: never anything an object holds.

use pseudoflow_crd::status::{RolloutPhase, RolloutStatus};
use serde_json::Value;

use super::plan::Plan;
use pseudoflow_crd::bind::MAX_FAILURES_SHOWN as MAX_NAMED;

/// The status of the rollout `p` plans, revisions named by `name` (hash → ControllerRevision
/// name), with `max_failures` the flow allows.
pub fn status(p: &Plan, name: impl Fn(&str) -> String, max_failures: u32) -> RolloutStatus {
    let revision = name(&p.target);
    let named: Vec<String> = p.failed.iter().take(MAX_NAMED).cloned().collect();
    let message = match p.phase {
        RolloutPhase::Completed => format!("{revision} serves every object ({})", p.updated),
        RolloutPhase::Stopped => format!(
            "{} object(s) of revision {revision} failed (maxFailures {max_failures}) in wave {} \
             of {}: {}; no further object gets it until they are mended (their retry, or a \
             change), or the rollout is promoted or undone",
            p.failed.len(),
            p.wave,
            p.waves,
            named.join(", ")
        ),
        RolloutPhase::Paused => format!(
            "paused at wave {} of {}: {} of {} object(s) updated to {revision}; no further \
             object gets it until it is resumed",
            p.wave, p.waves, p.updated, p.reach
        ),
        RolloutPhase::Progressing if !p.known => {
            "looking at every object before the waves go on".to_string()
        }
        RolloutPhase::Progressing => {
            let mut m = format!(
                "wave {} of {}: {} of {} object(s) updated to {revision}",
                p.wave, p.waves, p.updated, p.reach
            );
            if let Some(at) = p.recheck_at {
                m.push_str(&format!(
                    "; the next wave waits until each stayed ready (at {at})"
                ));
            }
            m
        }
    };
    RolloutStatus {
        revision,
        from: p.from.as_deref().map(&name),
        phase: p.phase,
        wave: p.wave,
        waves: p.waves,
        target: p.reach,
        updated: p.updated,
        failed_objects: named,
        message: Some(message),
        undone: p.undone.as_deref().map(&name),
        last_action: None,
    }
}

/// An Event to publish: (Warning?, reason, note).
pub type Told = (bool, &'static str, String);

/// The Event telling the change from the rollout status last written (`previous`, as the
/// flow's status shows it, null when none) to `now`; `waved`: whether the flow has waves. A
/// flow's first revision (nothing before it to keep) has no waves nor completion to tell.
pub fn event(previous: &Value, now: &RolloutStatus, waved: bool) -> Option<Told> {
    let same_revision = previous["revision"].as_str() == Some(now.revision.as_str())
        && previous["undone"].as_str() == now.undone.as_deref();
    let was = |phase: &str| same_revision && previous["phase"] == phase;
    let rev = &now.revision;
    match now.phase {
        RolloutPhase::Stopped if !was("Stopped") => Some((
            true,
            "RolloutStopped",
            format!(
                "the rollout of {rev} stopped at wave {} of {}: {} failed",
                now.wave,
                now.waves,
                now.failed_objects.join(", ")
            ),
        )),
        RolloutPhase::Completed if !was("Completed") && now.from.is_some() => Some((
            false,
            "RolloutCompleted",
            format!("{rev} serves every object ({})", now.updated),
        )),
        RolloutPhase::Progressing
            if waved
                && now.from.is_some()
                && (!same_revision || previous["wave"].as_u64() != Some(u64::from(now.wave))) =>
        {
            Some((
                false,
                "RolloutWave",
                format!(
                    "wave {} of {} of {rev}: {} object(s) to have it",
                    now.wave, now.waves, now.target
                ),
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeSet;

    fn plan(phase: RolloutPhase, wave: u32, failed: &[&str]) -> Plan {
        Plan {
            target: "h2".into(),
            from: Some("h1".into()),
            undone: None,
            phase,
            wave,
            waves: 3,
            reach: 1,
            updated: 0,
            failed: failed.iter().map(|s| s.to_string()).collect(),
            assigned: BTreeSet::new(),
            everyone: false,
            action: None,
            recheck_at: None,
            known: true,
        }
    }

    fn name(h: &str) -> String {
        format!("widgets-{h}")
    }

    #[test]
    fn a_stop_names_the_revision_and_the_failing_objects_once() {
        let s = status(&plan(RolloutPhase::Stopped, 1, &["ns/w-00"]), name, 1);
        assert_eq!(s.revision, "widgets-h2");
        assert_eq!(s.from.as_deref(), Some("widgets-h1"));
        assert_eq!(s.failed_objects, ["ns/w-00"]);
        assert!(s.message.as_ref().unwrap().contains("ns/w-00"));
        let (warning, reason, note) = event(&Value::Null, &s, true).unwrap();
        assert!(warning);
        assert_eq!(reason, "RolloutStopped");
        assert!(
            note.contains("widgets-h2") && note.contains("ns/w-00"),
            "{note}"
        );
        let written = serde_json::to_value(&s).unwrap();
        assert_eq!(event(&written, &s, true), None, "told once");
    }

    #[test]
    fn a_wave_is_told_when_it_starts_and_completion_only_after_a_change_of_revision() {
        let w1 = status(&plan(RolloutPhase::Progressing, 1, &[]), name, 1);
        assert_eq!(event(&Value::Null, &w1, true).unwrap().1, "RolloutWave");
        assert_eq!(event(&Value::Null, &w1, false), None, "no waves: none told");
        let before = serde_json::to_value(&w1).unwrap();
        assert_eq!(event(&before, &w1, true), None);
        let mut first = w1.clone();
        first.from = None;
        assert_eq!(event(&Value::Null, &first, true), None, "a first revision");
        let w2 = status(&plan(RolloutPhase::Progressing, 2, &[]), name, 1);
        assert_eq!(event(&before, &w2, true).unwrap().1, "RolloutWave");
        let done = status(&plan(RolloutPhase::Completed, 3, &[]), name, 1);
        assert_eq!(event(&before, &done, true).unwrap().1, "RolloutCompleted");
        let mut first = done.clone();
        first.from = None;
        assert_eq!(
            event(&json!(null), &first, true),
            None,
            "a flow's first revision"
        );
    }
}
