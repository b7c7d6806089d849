//! When a failed object of a flow recorded in its objects is tried again (`bind.retry`,
//! docs/bound-flows.md#recorded-in-the-object-bindrecord-object): capped exponential backoff
//! from its last failure, as a kopf handler that raised is retried, until a run succeeds, the
//! failure is permanent, or the object changes (a change is run at once and counts from zero).
//!
//! Pure. What is due comes from the object's served mark (so it survives a restart) and, while
//! this process lives, from the schedule it keeps of each failing object, bound to the mark it
//! wrote: a mark edited or removed by whoever may write the object is not believed against that
//! schedule, so it can neither bring an attempt forward nor cancel one
//! (docs/security.md, "served mark").

use pseudoflow_crd::bind::BindRetry;
use pseudoflow_crd::protocol::names::sha256_hex;
use serde_json::{json, Value};

use crate::bind::served::Mark;

/// What this process knows of one failing object: when it is due, and the mark it wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The object's namespace ("" for a cluster-scoped kind) and name, to serve it when due.
    pub object: (String, String),
    /// The object's uid (a schedule of an earlier object of the same name counts as none).
    pub uid: String,
    /// Failed runs in a row.
    pub failures: u32,
    /// When the next attempt is due (Unix seconds).
    pub due: i64,
    /// What started the failed run; its retries run with it.
    pub trigger: Value,
    /// Digest of the mark written for it (or read, after a restart).
    pub mark: String,
    /// Not handed out to serve again before this time (Unix seconds): set when it is handed
    /// out, so that a serve that could not run it (an error, a suspended flow) is not handed
    /// it again at once, but a backoff later.
    pub held: i64,
}

/// What a serve does with an object.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Run it.
    Run {
        /// What its run sees as `${trigger}`.
        trigger: Value,
        /// Failed runs in a row before this one.
        failures: u32,
    },
    /// A retry is due at this time (Unix seconds): nothing now.
    Wait(i64),
    /// Nothing to do: served, or failed for good until it changes.
    Nothing,
}

/// Digest of a mark's annotation text.
pub fn digest(raw: &str) -> String {
    let mut d = sha256_hex(&[raw]);
    d.truncate(32);
    d
}

/// When a run that failed at `at`, the `failures`-th in a row, is tried again.
pub fn due(policy: &BindRetry, failures: u32, at: i64) -> i64 {
    let wait = i64::try_from(policy.backoff(failures)).unwrap_or(i64::MAX / 2);
    at.saturating_add(wait)
}

/// What to do with an object whose mark annotation is `raw` (decoded: `mark`), for which the
/// mark computes `changed` (Some: the object changed since, run with this trigger) and this
/// process knows `known` (its schedule, for this object's uid), at `now`.
pub fn next(
    policy: &BindRetry,
    raw: Option<&str>,
    mark: Option<&Mark>,
    changed: Option<Value>,
    known: Option<&Schedule>,
    now: i64,
) -> Next {
    let believed = known.is_none_or(|k| raw.map(digest).as_deref() == Some(k.mark.as_str()));
    if !believed {
        // Not the mark this process wrote: its own schedule stands, whatever the mark says.
        let k = known.expect("not believed only against a schedule");
        if now < k.due {
            return Next::Wait(k.due);
        }
        let trigger = changed.unwrap_or_else(|| k.trigger.clone());
        let failures = k.failures;
        return Next::Run { trigger, failures };
    }
    if let Some(trigger) = changed {
        return Next::Run {
            trigger,
            failures: 0,
        };
    }
    let Some(m) = mark.filter(|m| m.failed && !m.permanent && m.failures > 0) else {
        return Next::Nothing;
    };
    let at = due(policy, m.failures, m.failed_at);
    if now < at {
        return Next::Wait(at);
    }
    let trigger = m.retry_trigger.clone();
    Next::Run {
        trigger: trigger.unwrap_or_else(|| json!({"event": "update", "changed": []})),
        failures: m.failures,
    }
}

/// What the status says after failure number `failures` in a row: when the next attempt is,
/// or that there is none.
pub fn told(policy: &BindRetry, failures: u32, permanent: bool, now: i64) -> String {
    if permanent {
        return "not retried: the step cannot be rendered from this object (it runs again \
                when the object changes)"
            .into();
    }
    let at = due(policy, failures, now);
    let when = k8s_openapi::jiff::Timestamp::from_second(at)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let wait = at - now;
    format!("attempt {failures} failed, next attempt at {when} (in {wait} s)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> BindRetry {
        BindRetry {
            backoff_seconds: 2,
            max_backoff_seconds: 4,
        }
    }

    fn failed_mark(failures: u32, at: i64, permanent: bool) -> Mark {
        let view = json!({"metadata": {"uid": "u1", "generation": 1}, "spec": {}});
        let bind = serde_json::from_value(json!({"apiVersion": "x/v1", "kind": "W"})).unwrap();
        let mut m = Mark::of("f", 1, &view, &bind);
        m.failed = true;
        m.failures = failures;
        m.failed_at = at;
        m.permanent = permanent;
        m.retry_trigger = Some(json!({"event": "create", "changed": []}));
        m
    }

    #[test]
    fn a_failed_object_is_due_a_capped_doubling_backoff_after_its_failure_from_its_mark_alone() {
        // A restarted controller knows no schedule: the mark says when.
        let m = failed_mark(2, 100, false);
        let raw = m.encode();
        let p = policy();
        assert_eq!(
            next(&p, Some(&raw), Some(&m), None, None, 103),
            Next::Wait(104)
        );
        let run = next(&p, Some(&raw), Some(&m), None, None, 104);
        let create = json!({"event": "create", "changed": []});
        assert_eq!(
            run,
            Next::Run {
                trigger: create,
                failures: 2
            }
        );
        let m5 = failed_mark(5, 100, false);
        let raw5 = m5.encode();
        assert_eq!(
            next(&p, Some(&raw5), Some(&m5), None, None, 100),
            Next::Wait(104),
            "capped"
        );
        assert_eq!(
            told(&p, 1, false, 0),
            "attempt 1 failed, next attempt at 1970-01-01T00:00:02Z (in 2 s)"
        );
    }

    #[test]
    fn a_change_runs_at_once_and_a_permanent_failure_waits_for_one() {
        let p = policy();
        let m = failed_mark(3, 100, false);
        let raw = m.encode();
        let changed = json!({"event": "update", "changed": [".spec"]});
        let run = next(&p, Some(&raw), Some(&m), Some(changed.clone()), None, 100);
        assert_eq!(
            run,
            Next::Run {
                trigger: changed,
                failures: 0
            }
        );
        let perm = failed_mark(1, 100, true);
        let raw = perm.encode();
        assert_eq!(
            next(&p, Some(&raw), Some(&perm), None, None, 10_000),
            Next::Nothing
        );
        assert!(told(&p, 1, true, 0).starts_with("not retried"));
    }

    /// Whoever may write the object edits or removes its mark (to be served at once, or never
    /// again): while this process keeps the object's schedule, the schedule stands.
    #[test]
    fn attack_an_edited_or_removed_mark_neither_brings_an_attempt_forward_nor_cancels_it() {
        let p = policy();
        let ours = failed_mark(2, 100, false);
        let raw = ours.encode();
        let known = Schedule {
            object: ("ns".into(), "w".into()),
            uid: "u1".into(),
            failures: 2,
            due: 104,
            trigger: json!({"event": "create", "changed": []}),
            mark: digest(&raw),
            held: 0,
        };
        // Forged: one failure long ago (due at once), or no failure at all (never retried).
        let early = failed_mark(1, 0, false);
        let mut fine = failed_mark(0, 0, false);
        fine.failed = false;
        for forged in [early, fine] {
            let f = forged.encode();
            assert_eq!(
                next(&p, Some(&f), Some(&forged), None, Some(&known), 101),
                Next::Wait(104)
            );
            assert!(matches!(
                next(&p, Some(&f), Some(&forged), None, Some(&known), 104),
                Next::Run { failures: 2, .. }
            ));
        }
        // Removed: it would be served as new (a create), now.
        let create = Some(json!({"event": "create", "changed": []}));
        assert_eq!(
            next(&p, None, None, create, Some(&known), 101),
            Next::Wait(104)
        );
        // Its own mark is believed.
        assert_eq!(
            next(&p, Some(&raw), Some(&ours), None, Some(&known), 101),
            Next::Wait(104)
        );
    }
}
