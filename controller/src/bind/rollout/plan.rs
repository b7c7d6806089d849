//! Which objects a bound flow's rollout serves with its new revision now: derived, never
//! stored, from each object's record (the revision that last served it, whether that run
//! failed, when it ended), the flow's `spec.rollout`, its revisions and the action a person
//! asked for (docs/decisions.md#rolling-a-bound-flows-revision-out-in-waves). So a controller
//! killed mid-rollout plans the same waves again from the same records. Pure.

use std::collections::BTreeSet;

use pseudoflow_crd::rollout::{Rollout, RolloutAction, Wave};
use pseudoflow_crd::status::RolloutPhase;

/// What an object's record says of its latest run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatestRun {
    /// Its run with the record's revision is going.
    Running,
    /// It succeeded, ending at this time (Unix seconds).
    Ready(i64),
    /// It failed.
    Failed,
}

/// One object of the flow as its record shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `namespace/name` (the order objects are reached in).
    pub key: String,
    /// The hash of the revision that last served it (or serves it now); None: none recorded.
    pub revision: Option<String>,
    /// Its latest run.
    pub state: LatestRun,
}

/// What the planner decides from.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// Every object known.
    pub objects: &'a [Record],
    /// Whether they are every object of the flow (false until this process has looked at every
    /// object once: then only objects already on the target are served with it).
    pub known: bool,
    /// The hash of the flow's current revision.
    pub current: &'a str,
    /// The hash of the revision before it (the highest-numbered below), if any.
    pub previous: Option<&'a str>,
    /// The flow's `spec.rollout`.
    pub rollout: &'a Rollout,
    /// The action a person asked for on this rollout, if accepted.
    pub action: Option<RolloutAction>,
    /// Now (Unix seconds).
    pub now: i64,
}

/// Where the rollout stands, and who is served with which revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The hash of the revision rolled out (the current one, or the previous after an undo).
    pub target: String,
    /// The hash of the revision objects not reached keep if they have none of their own.
    pub from: Option<String>,
    /// After an undo: the hash of the revision taken back.
    pub undone: Option<String>,
    /// Where it stands.
    pub phase: RolloutPhase,
    /// The wave under way (1-based) and the waves in all.
    pub wave: u32,
    /// See [`Plan::wave`].
    pub waves: u32,
    /// Objects the waves so far are to have on the target.
    pub reach: u32,
    /// Objects the target served without failure.
    pub updated: u32,
    /// Objects of the target whose latest run failed (`namespace/name`, in order).
    pub failed: Vec<String>,
    /// The objects served with the target now.
    pub assigned: BTreeSet<String>,
    /// Whether any other object (one not known yet, created now) is served with the target too
    /// (the last wave goes on), rather than with the revision it has.
    pub everyone: bool,
    /// The action taken into account.
    pub action: Option<RolloutAction>,
    /// When to look again though nothing changes (an object's `minReadySeconds` ends).
    pub recheck_at: Option<i64>,
    /// Whether every object was known (see [`Input::known`]).
    pub known: bool,
}

impl Plan {
    /// The hash of the revision object `key` is served with, given the revision its record
    /// names (`recorded`) and whether a revision is still kept (`kept`): the target if the
    /// waves reached it, else the revision that last served it, else [`Plan::from`].
    pub fn revision_for(
        &self,
        key: &str,
        recorded: Option<&str>,
        kept: impl Fn(&str) -> bool,
    ) -> String {
        if self.everyone || self.assigned.contains(key) {
            return self.target.clone();
        }
        recorded
            .filter(|h| kept(h))
            .or(self.from.as_deref())
            .unwrap_or(&self.target)
            .to_string()
    }

    /// The objects reached that the target does not serve yet, nor serves now: to be served.
    pub fn due<'a>(&self, objects: &'a [Record]) -> Vec<&'a str> {
        objects
            .iter()
            .filter(|o| self.assigned.contains(&o.key))
            .filter(|o| o.revision.as_deref() != Some(self.target.as_str()))
            .map(|o| o.key.as_str())
            .collect()
    }
}

/// How many objects the target has reached at the end of each wave, out of `n`: each wave's
/// reach (never fewer than the wave before), then every object (implied unless the last wave
/// says 100%). No waves: one wave of every object.
pub fn reaches(rollout: &Rollout, n: u32) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    let mut last_all = false;
    for w in rollout.waves.iter().filter_map(|w| Wave::parse(w).ok()) {
        let before = out.last().copied().unwrap_or(0);
        out.push(w.reach(n).max(before));
        last_all = w == Wave::Percent(100);
    }
    if !last_all {
        out.push(n);
    }
    out
}

/// The revisions' roles after the action: (target, from, undone, the action taken). `undo`
/// swaps them; with no previous revision there is nothing to undo to, and it is not taken.
fn roles(
    i: &Input<'_>,
) -> (
    String,
    Option<String>,
    Option<String>,
    Option<RolloutAction>,
) {
    let current = i.current.to_string();
    match (i.action, i.previous) {
        (Some(RolloutAction::Undo), Some(p)) => (
            p.to_string(),
            Some(current.clone()),
            Some(current),
            i.action,
        ),
        (Some(RolloutAction::Undo), None) => (current, None, None, None),
        (a, p) => (current, p.map(String::from), None, a),
    }
}

/// What the records say of the objects on the target.
struct Counted {
    /// Those on it (served, failed or running).
    on: BTreeSet<String>,
    /// Those whose latest run with it failed, in order.
    failed: Vec<String>,
    /// Those it served without failure, and of them those `minReadySeconds` ago.
    updated: u32,
    ready: u32,
    /// The soonest a served one will have been served `minReadySeconds` ago.
    waiting: Option<i64>,
}

fn counted(i: &Input<'_>, target: &str) -> Counted {
    let min_ready = i64::from(i.rollout.min_ready_seconds.unwrap_or(0));
    let on: Vec<&Record> = i
        .objects
        .iter()
        .filter(|o| o.revision.as_deref() == Some(target))
        .collect();
    let ready_at: Vec<i64> = on
        .iter()
        .filter_map(|o| match o.state {
            LatestRun::Ready(at) => Some(at.saturating_add(min_ready)),
            _ => None,
        })
        .collect();
    let mut failed: Vec<String> = on
        .iter()
        .filter(|o| o.state == LatestRun::Failed)
        .map(|o| o.key.clone())
        .collect();
    failed.sort();
    Counted {
        on: on.iter().map(|o| o.key.clone()).collect(),
        failed,
        updated: ready_at.len() as u32,
        ready: ready_at.iter().filter(|t| **t <= i.now).count() as u32,
        waiting: ready_at.iter().copied().filter(|t| *t > i.now).min(),
    }
}

/// The objects on the target, and the first others in name order up to `reach`.
fn reached(objects: &[Record], on: &BTreeSet<String>, reach: u32) -> BTreeSet<String> {
    let mut assigned = on.clone();
    let need = (reach as usize).saturating_sub(assigned.len());
    let mut others: Vec<&Record> = objects.iter().filter(|o| !on.contains(&o.key)).collect();
    others.sort_by(|a, b| a.key.cmp(&b.key));
    assigned.extend(others.into_iter().take(need).map(|o| o.key.clone()));
    assigned
}

/// The rollout's plan.
pub fn plan(i: &Input<'_>) -> Plan {
    let (target, from, undone, action) = roles(i);
    let waved = !i.rollout.waves.is_empty();
    let n = i.objects.len() as u32;
    let reaches = reaches(i.rollout, n);
    let last = reaches.len() - 1;
    let c = counted(i, &target);
    let failures = c.failed.len() as u32;
    // Failures below `maxFailures` are tolerated: those objects count as done for their wave.
    let tolerated = failures < i.rollout.failures_allowed();
    let done = c.ready + if tolerated { failures } else { 0 };
    let promoted = action == Some(RolloutAction::Promote);
    let mut w = if promoted { last } else { 0 };
    while w < last && i.known && done >= reaches[w] {
        w += 1;
    }
    let completed = i.known && c.updated == n;
    let phase = if completed {
        RolloutPhase::Completed
    } else if waved && !promoted && !tolerated {
        RolloutPhase::Stopped
    } else if action == Some(RolloutAction::Pause) {
        RolloutPhase::Paused
    } else {
        RolloutPhase::Progressing
    };
    let moving = phase == RolloutPhase::Progressing && (i.known || !waved);
    let assigned = if moving {
        reached(i.objects, &c.on, reaches[w])
    } else {
        c.on.clone()
    };
    // The next wave waits for objects to have stayed ready long enough.
    let held = moving && w < last;
    Plan {
        target,
        from,
        undone,
        phase,
        wave: w as u32 + 1,
        waves: reaches.len() as u32,
        reach: reaches[w],
        updated: c.updated,
        failed: c.failed,
        assigned,
        everyone: completed || (moving && w == last),
        action,
        recheck_at: c.waiting.filter(|_| held),
        known: i.known,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rollout(v: serde_json::Value) -> Rollout {
        serde_json::from_value(v).unwrap()
    }

    fn key(i: usize) -> String {
        format!("ns/w-{i:02}")
    }

    /// `n` objects on revision `rev`, each served without failure at time 0.
    fn on(n: usize, rev: &str) -> Vec<Record> {
        (0..n)
            .map(|i| Record {
                key: key(i),
                revision: Some(rev.into()),
                state: LatestRun::Ready(0),
            })
            .collect()
    }

    fn input<'a>(objects: &'a [Record], r: &'a Rollout) -> Input<'a> {
        Input {
            objects,
            known: true,
            current: "R",
            previous: Some("S"),
            rollout: r,
            action: None,
            now: 1000,
        }
    }

    /// Serves every object `p` assigns and that its record does not show on the target, with
    /// the target (`fails`: those whose run fails), at `at`.
    fn serve(objects: &mut [Record], p: &Plan, fails: &[&str], at: i64) -> usize {
        let due: Vec<String> = p.due(objects).into_iter().map(String::from).collect();
        for o in objects.iter_mut().filter(|o| due.contains(&o.key)) {
            o.revision = Some(p.target.clone());
            o.state = if fails.contains(&o.key.as_str()) {
                LatestRun::Failed
            } else {
                LatestRun::Ready(at)
            };
        }
        due.len()
    }

    fn on_target(objects: &[Record], rev: &str) -> usize {
        objects
            .iter()
            .filter(|o| o.revision.as_deref() == Some(rev))
            .count()
    }

    #[test]
    fn no_waves_serves_every_object_with_the_new_revision_at_once() {
        let r = Rollout::default();
        let mut objects = on(20, "S");
        let p = plan(&input(&objects, &r));
        assert_eq!((p.wave, p.waves, p.reach), (1, 1, 20));
        assert_eq!(p.phase, RolloutPhase::Progressing);
        assert!(p.everyone, "a new object gets it too");
        assert_eq!(p.revision_for("ns/new", None, |_| true), "R");
        assert_eq!(serve(&mut objects, &p, &["ns/w-03"], 5), 20);
        let p = plan(&input(&objects, &r));
        assert_eq!(
            p.phase,
            RolloutPhase::Progressing,
            "a failure stops nothing"
        );
        assert_eq!(p.failed, ["ns/w-03"]);
        objects[3].state = LatestRun::Ready(6);
        let p = plan(&input(&objects, &r));
        assert_eq!((p.phase, p.updated), (RolloutPhase::Completed, 20));
    }

    #[test]
    fn waves_of_one_then_half_reach_1_then_10_then_20_objects_in_name_order() {
        let r = rollout(json!({"waves": [1, "50%"]}));
        let mut objects = on(20, "S");
        let mut seen = Vec::new();
        loop {
            let p = plan(&input(&objects, &r));
            seen.push((p.wave, p.reach, p.assigned.len()));
            if p.phase == RolloutPhase::Completed {
                break;
            }
            assert_eq!(p.waves, 3);
            if p.wave == 1 {
                assert_eq!(p.assigned, BTreeSet::from([key(0)]), "the first by name");
                assert_eq!(p.revision_for(&key(5), Some("S"), |_| true), "S");
            }
            if p.wave == 2 {
                let want: BTreeSet<String> = (0..10).map(key).collect();
                assert_eq!(p.assigned, want);
            }
            serve(&mut objects, &p, &[], 10);
            assert!(seen.len() < 10, "{seen:?}");
        }
        assert_eq!(seen, [(1, 1, 1), (2, 10, 10), (3, 20, 20), (3, 20, 20)]);
        assert_eq!(on_target(&objects, "R"), 20);
    }

    #[test]
    fn a_failure_in_the_first_wave_stops_the_rollout_with_19_objects_untouched() {
        let r = rollout(json!({"waves": [1, "50%"]}));
        let mut objects = on(20, "S");
        let p = plan(&input(&objects, &r));
        serve(&mut objects, &p, &["ns/w-00"], 10);
        for _ in 0..3 {
            let p = plan(&input(&objects, &r));
            assert_eq!(p.phase, RolloutPhase::Stopped);
            assert_eq!((p.wave, p.reach, p.updated), (1, 1, 0));
            assert_eq!(p.failed, ["ns/w-00"], "names the failing object");
            assert!(!p.everyone);
            assert_eq!(p.due(&objects), Vec::<&str>::new());
            assert_eq!(p.revision_for("ns/new", None, |_| true), "S");
            assert_eq!(serve(&mut objects, &p, &[], 11), 0);
        }
        assert_eq!(on_target(&objects, "S"), 19);
        // Mended (its retry succeeds): the stop clears itself and the waves go on.
        objects[0].state = LatestRun::Ready(20);
        let p = plan(&input(&objects, &r));
        assert_eq!(
            (p.phase, p.wave, p.reach),
            (RolloutPhase::Progressing, 2, 10)
        );
    }

    #[test]
    fn failures_below_max_failures_are_tolerated_and_the_wave_goes_on() {
        let r = rollout(json!({"waves": [2, "50%"], "maxFailures": 2}));
        let mut objects = on(20, "S");
        let p = plan(&input(&objects, &r));
        serve(&mut objects, &p, &["ns/w-00"], 10);
        let p = plan(&input(&objects, &r));
        assert_eq!(
            (p.phase, p.wave, p.reach),
            (RolloutPhase::Progressing, 2, 10)
        );
        serve(&mut objects, &p, &["ns/w-05"], 10);
        let p = plan(&input(&objects, &r));
        assert_eq!((p.phase, p.wave), (RolloutPhase::Stopped, 2));
        assert_eq!(p.failed, ["ns/w-00", "ns/w-05"]);
    }

    #[test]
    fn min_ready_seconds_holds_the_next_wave_and_says_when_to_look_again() {
        let r = rollout(json!({"waves": [1], "minReadySeconds": 30}));
        let mut objects = on(4, "S");
        let p = plan(&input(&objects, &r));
        serve(&mut objects, &p, &[], 1000);
        let mut i = input(&objects, &r);
        i.now = 1010;
        let p = plan(&i);
        assert_eq!((p.wave, p.reach, p.updated), (1, 1, 1));
        assert_eq!(p.recheck_at, Some(1030));
        assert!(p.due(&objects).is_empty());
        i.now = 1030;
        let p = plan(&i);
        assert_eq!((p.wave, p.reach, p.recheck_at), (2, 4, None));
        assert_eq!(p.due(&objects).len(), 3);
    }

    #[test]
    fn a_running_object_counts_on_its_revision_but_not_as_served() {
        let r = rollout(json!({"waves": [1, "50%"]}));
        let mut objects = on(4, "S");
        objects[2].revision = Some("R".into());
        objects[2].state = LatestRun::Running;
        let p = plan(&input(&objects, &r));
        assert_eq!((p.wave, p.updated), (1, 0));
        assert_eq!(p.assigned, BTreeSet::from([key(2)]), "no second object");
        assert!(p.due(&objects).is_empty());
    }

    #[test]
    fn pause_holds_objects_not_on_the_revision_and_resume_goes_on() {
        let r = rollout(json!({"waves": [1, "50%"]}));
        let mut objects = on(20, "S");
        let p = plan(&input(&objects, &r));
        serve(&mut objects, &p, &[], 10);
        let mut i = input(&objects, &r);
        i.action = Some(RolloutAction::Pause);
        let p = plan(&i);
        assert_eq!((p.phase, p.wave), (RolloutPhase::Paused, 2));
        assert_eq!(p.assigned, BTreeSet::from([key(0)]));
        assert_eq!(p.due(&objects), Vec::<&str>::new());
        assert_eq!(p.revision_for(&key(0), Some("R"), |_| true), "R");
        assert_eq!(p.revision_for(&key(1), Some("S"), |_| true), "S");
        i.action = Some(RolloutAction::Resume);
        let p = plan(&i);
        assert_eq!((p.phase, p.reach), (RolloutPhase::Progressing, 10));
        assert_eq!(p.due(&objects).len(), 9);
    }

    #[test]
    fn promote_goes_to_the_last_wave_whatever_failed() {
        let r = rollout(json!({"waves": [1, "50%"]}));
        let mut objects = on(20, "S");
        let p = plan(&input(&objects, &r));
        serve(&mut objects, &p, &["ns/w-00"], 10);
        let mut i = input(&objects, &r);
        i.action = Some(RolloutAction::Promote);
        let p = plan(&i);
        assert_eq!(
            (p.phase, p.wave, p.reach),
            (RolloutPhase::Progressing, 3, 20)
        );
        assert!(p.everyone);
        assert_eq!(p.due(&objects).len(), 19);
    }

    #[test]
    fn undo_serves_the_objects_on_the_new_revision_with_the_previous_one_in_the_same_waves() {
        let r = rollout(json!({"waves": [1, "50%"]}));
        let mut objects = on(20, "S");
        let p = plan(&input(&objects, &r));
        serve(&mut objects, &p, &[], 10);
        let p = plan(&input(&objects, &r));
        serve(&mut objects, &p, &[], 10);
        assert_eq!(on_target(&objects, "R"), 10);
        let undo = |objects: &[Record]| -> Plan {
            let mut i = input(objects, &r);
            i.action = Some(RolloutAction::Undo);
            plan(&i)
        };
        let p = undo(&objects);
        assert_eq!(p.target, "S");
        assert_eq!(
            (p.from.as_deref(), p.undone.as_deref()),
            (Some("R"), Some("R"))
        );
        // 10 of 20 are on S already: the first two waves are complete, the last goes on.
        assert_eq!((p.wave, p.reach), (3, 20));
        assert_eq!(p.due(&objects).len(), 10);
        serve(&mut objects, &p, &[], 20);
        let p = undo(&objects);
        assert_eq!(p.phase, RolloutPhase::Completed);
        assert_eq!(on_target(&objects, "S"), 20);
        // With no previous revision there is nothing to undo to.
        let mut first = input(&objects, &r);
        first.previous = None;
        first.action = Some(RolloutAction::Undo);
        let p = plan(&first);
        assert_eq!((p.target.as_str(), p.action), ("R", None));
    }

    #[test]
    fn an_object_created_mid_rollout_keeps_the_old_revision_unless_the_order_picks_it() {
        let r = rollout(json!({"waves": [1, "50%"]}));
        let mut objects = on(20, "S");
        let p = plan(&input(&objects, &r));
        serve(&mut objects, &p, &[], 10);
        // Created now, not known yet: the revision objects not reached keep.
        let p = plan(&input(&objects, &r));
        assert_eq!(p.revision_for("ns/a-new", None, |_| true), "S");
        // Known at the next look, first by name: the order picks it for wave 2.
        objects.push(Record {
            key: "ns/a-new".into(),
            revision: Some("S".into()),
            state: LatestRun::Ready(11),
        });
        let p = plan(&input(&objects, &r));
        assert_eq!(p.reach, 11, "half of 21, rounded up");
        assert!(p.assigned.contains("ns/a-new"));
        // Another, last by name, is not picked before the last wave.
        assert_eq!(p.revision_for("ns/z-new", None, |_| true), "S");
    }

    #[test]
    fn an_object_on_an_older_revision_that_changes_keeps_it() {
        let r = rollout(json!({"waves": [1, "50%"]}));
        let mut objects = on(20, "S");
        objects[19].revision = Some("OLD".into());
        let p = plan(&input(&objects, &r));
        assert_eq!(p.revision_for(&key(19), Some("OLD"), |_| true), "OLD");
        // Its revision gone (pruned): the revision objects not reached keep.
        assert_eq!(p.revision_for(&key(19), Some("OLD"), |h| h != "OLD"), "S");
        assert_eq!(p.revision_for(&key(0), Some("S"), |_| true), "R");
    }

    #[test]
    fn before_every_object_is_known_only_objects_on_the_target_keep_it() {
        let r = rollout(json!({"waves": [1, "50%"]}));
        let mut objects = on(3, "S");
        objects[1].revision = Some("R".into());
        let mut i = input(&objects, &r);
        i.known = false;
        let p = plan(&i);
        assert_eq!(p.assigned, BTreeSet::from([key(1)]));
        assert!(!p.everyone);
        assert_eq!(p.revision_for("ns/other", Some("S"), |_| true), "S");
        let no_waves = Rollout::default();
        i.rollout = &no_waves;
        assert!(
            plan(&i).everyone,
            "no waves: every object at once, as always"
        );
    }

    #[test]
    fn reaches_never_go_down_and_a_last_wave_of_every_object_is_implied() {
        let r = |v| rollout(json!({ "waves": v }));
        assert_eq!(reaches(&r(json!([1, "50%"])), 20), [1, 10, 20]);
        assert_eq!(reaches(&r(json!([5, "10%"])), 20), [5, 5, 20]);
        assert_eq!(reaches(&r(json!(["10%", "100%"])), 20), [2, 20]);
        assert_eq!(reaches(&Rollout::default(), 7), [7]);
        assert_eq!(reaches(&r(json!([1])), 0), [0, 0]);
    }
}
