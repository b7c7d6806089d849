//! Retries walked with the real walker on plans compiled from small flows.

use serde_json::{json, Value};

use super::*;
use crate::tests::{self as walk_tests, plan as compiled, started};
use crate::{Completion, RunState, Walker};
use pseudoflow_compiler::Compiled;

fn step(name: &str) -> Value {
    json!({"type": "apply", "name": name,
           "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}})
}

/// Completes `id` as `ok` says (the walk tests' `finish`) and returns what started next.
fn finish(w: &Walker, s: &mut RunState, id: &str, ok: bool) -> Vec<String> {
    let c = if ok {
        walk_tests::ok()
    } else {
        walk_tests::failed("boom")
    };
    started(&walk_tests::finish(w, s, id, c))
}

fn request<'a>(from: Option<&'a str>) -> Request<'a> {
    Request {
        id: "r2",
        token: "t1",
        from,
        now: 100,
    }
}

/// a, b, c where b failed: a succeeded (with an output and its Job), c never ran.
fn failed_at_b() -> (Compiled, StoredRun) {
    let c = compiled(json!([step("a"), step("b"), step("c")]));
    let w = Walker::new(&c.plan);
    let mut run = StoredRun {
        run_id: "r1".into(),
        trigger: Some("again".into()),
        generation: 3,
        ..Default::default()
    };
    assert_eq!(started(&w.advance(&mut run.state, 0)), ["s0"]);
    assert_eq!(finish(&w, &mut run.state, "s0", true), ["s1"]);
    run.state.entry("s0", &[]).job_node = Some("s0".into());
    run.vars.insert("from_a".into(), json!("kept"));
    finish(&w, &mut run.state, "s1", false);
    assert_eq!(run.state.phase, RunPhase::Failed);
    (c, run)
}

#[test]
fn a_retry_keeps_what_succeeded_and_starts_at_the_failed_step() {
    let (c, old) = failed_at_b();
    let mut run = retry_run(&c.plan, &old, request(None)).unwrap();
    assert_eq!(run.run_id, "r2");
    assert_eq!(run.retry_of.as_deref(), Some("r1"));
    assert_eq!(run.retried_from.as_deref(), Some("b"));
    assert_eq!(run.retry_token.as_deref(), Some("t1"));
    assert_eq!((run.generation, run.trigger.as_deref()), (3, Some("again")));
    assert_eq!(
        run.vars["from_a"], "kept",
        "outputs of kept steps are restored"
    );
    assert_eq!(run.state.phase, RunPhase::Running);
    assert!(run.state.failure.is_none());
    assert!(run.secret.is_empty(), "a new run gets a new journal secret");
    let a = &run.state.instances["s0"];
    assert_eq!((a.phase, a.job_node.as_deref()), (Phase::Succeeded, None));
    let w = Walker::new(&c.plan);
    assert_eq!(
        started(&w.advance(&mut run.state, 100)),
        ["s1"],
        "a is not run again"
    );
    assert_eq!(finish(&w, &mut run.state, "s1", true), ["s2"]);
    finish(&w, &mut run.state, "s2", true);
    assert_eq!(run.state.phase, RunPhase::Succeeded);
}

#[test]
fn a_retry_from_a_step_runs_it_and_everything_after_it_again() {
    let (c, old) = failed_at_b();
    let w = Walker::new(&c.plan);
    let mut run = retry_run(&c.plan, &old, request(Some("a"))).unwrap();
    assert_eq!(run.retried_from.as_deref(), Some("a"));
    assert_eq!(started(&w.advance(&mut run.state, 100)), ["s0"]);
    // By path too, and from a run that succeeded.
    let mut done = run.clone();
    for id in ["s0", "s1", "s2"] {
        finish(&w, &mut done.state, id, true);
    }
    assert_eq!(done.state.phase, RunPhase::Succeeded);
    let mut again = retry_run(&c.plan, &done, request(Some("spec.steps[2]"))).unwrap();
    assert_eq!(started(&w.advance(&mut again.state, 100)), ["s2"]);
}

#[test]
fn a_retry_is_refused_while_running_after_a_success_and_for_an_unknown_step() {
    let (c, mut old) = failed_at_b();
    assert_eq!(
        retry_run(&c.plan, &old, request(Some("zz"))).unwrap_err(),
        Refused::UnknownStep("zz".into(), "r1".into())
    );
    old.state.phase = RunPhase::Succeeded;
    assert!(matches!(
        retry_run(&c.plan, &old, request(None)),
        Err(Refused::NothingFailed(_))
    ));
    old.state.phase = RunPhase::Running;
    let refused = retry_run(&c.plan, &old, request(None)).unwrap_err();
    assert!(refused.to_string().contains("still running"), "{refused}");
}

#[test]
fn a_retry_group_around_the_failure_starts_afresh_and_other_loop_items_are_kept() {
    let c = compiled(json!([
        {"type": "loop", "forEach": ["x", "y"], "steps": [step("each")]},
        {"type": "retry", "attempts": 2, "steps": [step("first"), step("flaky")]}
    ]));
    let w = Walker::new(&c.plan);
    let mut old = StoredRun {
        run_id: "r1".into(),
        ..Default::default()
    };
    assert_eq!(started(&w.advance(&mut old.state, 0)), ["s0"]);
    let items = Completion {
        items: Some(vec![("0".into(), json!("x")), ("1".into(), json!("y"))]),
        ..walk_tests::ok()
    };
    let mut o = w.complete(&mut old.state, "s0", &[], items, 0);
    o.actions.extend(w.advance(&mut old.state, 0).actions);
    assert_eq!(started(&o), ["s0-s0@0"]);
    assert_eq!(finish(&w, &mut old.state, "s0-s0@0", true), ["s0-s0@1"]);
    assert_eq!(finish(&w, &mut old.state, "s0-s0@1", true), ["s1-s0"]);
    // Both attempts of the group fail at its second step.
    for _ in 0..2 {
        assert_eq!(finish(&w, &mut old.state, "s1-s0", true), ["s1-s1"]);
        let retried = finish(&w, &mut old.state, "s1-s1", false);
        assert!(retried.is_empty() || retried == ["s1-s0"], "{retried:?}");
        if old.state.phase == RunPhase::Failed {
            break;
        }
        if retried.is_empty() {
            w.advance(&mut old.state, 1_000);
        }
    }
    assert_eq!(old.state.phase, RunPhase::Failed);
    let mut run = retry_run(&c.plan, &old, request(None)).unwrap();
    assert!(
        run.state.instances.contains_key("s0-s0@1"),
        "loop items kept"
    );
    assert_eq!(
        started(&w.advance(&mut run.state, 100)),
        ["s1-s0"],
        "the group runs whole again, from its first step"
    );
    assert_eq!(run.state.instances["s1"].attempt, 1, "with fresh attempts");
}

#[test]
fn a_retry_of_a_node_rollout_reruns_only_the_nodes_that_failed_or_never_ran() {
    let body = json!([{"type": "configFile", "path": "/etc/x", "content": "y"}]);
    let c =
        compiled(json!([{"type": "loopNodes", "selector": "", "maxParallel": 2, "steps": body}]));
    let w = Walker::new(&c.plan);
    let mut old = StoredRun {
        run_id: "r1".into(),
        ..Default::default()
    };
    w.advance(&mut old.state, 0);
    let items = Completion {
        items: Some(
            ["a", "b", "c", "d"]
                .map(|n| (n.to_string(), json!(n)))
                .to_vec(),
        ),
        ..walk_tests::ok()
    };
    let mut o = w.complete(&mut old.state, "s0", &[], items, 0);
    o.actions.extend(w.advance(&mut old.state, 0).actions);
    assert_eq!(started(&o), ["s0-s0@a", "s0-s0@b"]);
    assert_eq!(finish(&w, &mut old.state, "s0-s0@a", true), ["s0-s0@c"]);
    // b fails: the rollout stops, c is aborted, d never ran.
    finish(&w, &mut old.state, "s0-s0@b", false);
    assert_eq!(old.state.phase, RunPhase::Failed);
    let mut run = retry_run(&c.plan, &old, request(None)).unwrap();
    assert_eq!(
        run.state.instances["s0-s0@a"].phase,
        Phase::Succeeded,
        "a is kept"
    );
    let mut again = started(&w.advance(&mut run.state, 100));
    again.sort();
    assert_eq!(
        again,
        ["s0-s0@b", "s0-s0@c"],
        "b and c again, two at a time; a never"
    );
    assert_eq!(finish(&w, &mut run.state, "s0-s0@b", true), ["s0-s0@d"]);
    finish(&w, &mut run.state, "s0-s0@c", true);
    finish(&w, &mut run.state, "s0-s0@d", true);
    assert_eq!(run.state.phase, RunPhase::Succeeded);
}

#[test]
fn a_retry_asks_every_approval_again_and_runs_what_it_gates_again() {
    // a, gate, b, c: a and b succeeded, the gate was approved, c failed.
    let gate = json!({"type": "approval", "name": "gate"});
    let c = compiled(json!([step("a"), gate, step("b"), step("c")]));
    let w = Walker::new(&c.plan);
    let mut old = StoredRun {
        run_id: "r1".into(),
        ..Default::default()
    };
    assert_eq!(started(&w.advance(&mut old.state, 0)), ["s0"]);
    finish(&w, &mut old.state, "s0", true);
    assert_eq!(w.awaiting_decision(&old.state).len(), 1);
    assert_eq!(finish(&w, &mut old.state, "s1", true), ["s2"]);
    assert_eq!(finish(&w, &mut old.state, "s2", true), ["s3"]);
    finish(&w, &mut old.state, "s3", false);
    assert_eq!(old.state.phase, RunPhase::Failed);

    let mut run = retry_run(&c.plan, &old, request(None)).unwrap();
    assert_eq!(run.state.instances["s0"].phase, Phase::Succeeded, "a kept");
    for gated in ["s1", "s2", "s3"] {
        assert!(!run.state.instances.contains_key(gated), "{gated} kept");
    }
    assert!(started(&w.advance(&mut run.state, 100)).is_empty());
    let waiting: Vec<String> = w
        .awaiting_decision(&run.state)
        .into_iter()
        .map(|(n, _, _)| n.id.clone())
        .collect();
    assert_eq!(waiting, ["s1"], "the gate asks again; b waits for it");
}
