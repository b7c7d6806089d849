//! The walk rules of docs/dag.md, one test each, on plans compiled from small flows.

use super::*;
use pseudoflow_compiler::{compile, Compiled, FlowId};
use serde_json::json;

pub(crate) fn plan(steps: Value) -> Compiled {
    compile(
        &FlowId {
            name: "t",
            namespace: Some("ns"),
        },
        &json!({ "steps": steps }),
    )
    .unwrap_or_else(|d| panic!("{d}"))
}

pub(crate) fn ok() -> Completion {
    Completion {
        ok: true,
        ..Default::default()
    }
}

pub(crate) fn failed(msg: &str) -> Completion {
    Completion {
        ok: false,
        message: msg.into(),
        ..Default::default()
    }
}

/// Starts as `advance` says and returns the started instance ids.
pub(crate) fn started(o: &Outcome) -> Vec<String> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            Action::Start { node, key, .. } => Some(instance_id(node, key)),
            _ => None,
        })
        .collect()
}

fn aborted(o: &Outcome) -> Vec<String> {
    o.actions
        .iter()
        .filter_map(|a| match a {
            Action::Abort { node, key } => Some(instance_id(node, key)),
            _ => None,
        })
        .collect()
}

fn phase(s: &RunState, id: &str) -> Phase {
    s.instances.get(id).map(|i| i.phase).unwrap_or_default()
}

/// Completes an instance and advances; returns both outcomes' actions together.
pub(crate) fn finish(w: &Walker, s: &mut RunState, id: &str, c: Completion) -> Outcome {
    let (node, key) = split_instance_id(id);
    let mut o = w.complete(s, &node, &key, c, 0);
    let next = w.advance(s, 0);
    o.actions.extend(next.actions);
    o.wake_at = next.wake_at;
    o
}

fn apply_step(name: &str) -> Value {
    json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}})
}

#[test]
fn sequence_starts_one_step_after_the_other_and_succeeds() {
    let c = plan(json!([apply_step("a"), apply_step("b")]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(started(&w.advance(&mut s, 0)), ["s0"]);
    assert_eq!(started(&finish(&w, &mut s, "s0", ok())), ["s1"]);
    assert!(started(&finish(&w, &mut s, "s1", ok())).is_empty());
    assert_eq!(s.phase, RunPhase::Succeeded);
}

#[test]
fn a_failure_without_handler_fails_the_run_and_skips_nothing_else() {
    let c = plan(json!([apply_step("a"), apply_step("b")]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    let o = finish(&w, &mut s, "s0", failed("boom"));
    assert!(started(&o).is_empty());
    assert_eq!(s.phase, RunPhase::Failed);
    assert_eq!(s.failure, Some(("s0".into(), "boom".into())));
}

#[test]
fn continue_on_error_goes_on_after_a_failure() {
    let mut first = apply_step("a");
    first["continueOnError"] = json!(true);
    let c = plan(json!([first, apply_step("b")]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    assert_eq!(started(&finish(&w, &mut s, "s0", failed("boom"))), ["s1"]);
    assert_eq!(s.phase, RunPhase::Running);
}

#[test]
fn on_error_runs_the_handler_only_on_failure_and_continues() {
    let steps =
        json!([apply_step("a"), {"type": "onError", "steps": [apply_step("h")]}, apply_step("b")]);
    let c = plan(steps.clone());
    let w = Walker::new(&c.plan);
    // Failure: handler, then the next step.
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    assert_eq!(started(&finish(&w, &mut s, "s0", failed("x"))), ["s1-s0"]);
    assert_eq!(started(&finish(&w, &mut s, "s1-s0", ok())), ["s2"]);
    // Success: the handler is skipped.
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    assert_eq!(started(&finish(&w, &mut s, "s0", ok())), ["s2"]);
    assert_eq!(phase(&s, "s1-s0"), Phase::Skipped);
}

#[test]
fn a_failing_handler_fails_the_run() {
    let c = plan(
        json!([apply_step("a"), {"type": "onError", "steps": [apply_step("h")]}, apply_step("b")]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    finish(&w, &mut s, "s0", failed("x"));
    finish(&w, &mut s, "s1-s0", failed("handler broke"));
    assert_eq!(s.phase, RunPhase::Failed);
}

fn cond() -> Value {
    json!({"resource": {"kind": "Node", "name": "n"}, "jsonPath": ".metadata.name", "op": "equals", "value": "n"})
}

#[test]
fn if_runs_then_or_else_and_skips_the_other_branch() {
    let c = plan(
        json!([{"type": "if", "condition": cond(), "then": [apply_step("t")], "else": [apply_step("e")]}, apply_step("after")]),
    );
    let w = Walker::new(&c.plan);
    for (value, taken, skipped) in [
        (true, "s0-then-s0", "s0-else-s0"),
        (false, "s0-else-s0", "s0-then-s0"),
    ] {
        let mut s = RunState::default();
        assert_eq!(started(&w.advance(&mut s, 0)), ["s0"]);
        assert_eq!(
            started(&finish(
                &w,
                &mut s,
                "s0",
                Completion {
                    ok: true,
                    condition: Some(value),
                    ..ok()
                }
            )),
            [taken]
        );
        assert_eq!(phase(&s, skipped), Phase::Skipped);
        assert_eq!(started(&finish(&w, &mut s, taken, ok())), ["s1"]);
    }
}

#[test]
fn when_false_skips_only_the_guarded_step() {
    let c = plan(
        json!([{"type": "when", "condition": cond()}, apply_step("guarded"), apply_step("after")]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    let o = finish(
        &w,
        &mut s,
        "s0",
        Completion {
            condition: Some(false),
            ..ok()
        },
    );
    assert_eq!(started(&o), ["s2"]);
    assert_eq!(phase(&s, "s1"), Phase::Skipped);
}

#[test]
fn parallel_wait_for_all_joins_after_every_branch() {
    let c = plan(
        json!([{"type": "parallel", "steps": [[apply_step("a")], [apply_step("b")]]}, apply_step("after")]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(started(&w.advance(&mut s, 0)), ["s0-b0-s0", "s0-b1-s0"]);
    assert!(started(&finish(&w, &mut s, "s0-b0-s0", ok())).is_empty());
    assert_eq!(started(&finish(&w, &mut s, "s0-b1-s0", ok())), ["s1"]);
}

#[test]
fn parallel_first_success_wins_and_aborts_the_rest() {
    let c = plan(
        json!([{"type": "parallel", "waitForAll": false, "steps": [[apply_step("a")], [apply_step("b"), apply_step("c")]]}, apply_step("after")]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    // A failing branch does not fail the parallel while another may still succeed.
    let o = finish(&w, &mut s, "s0-b0-s0", failed("nope"));
    assert!(started(&o).is_empty());
    assert_eq!(s.phase, RunPhase::Running);
    assert_eq!(started(&finish(&w, &mut s, "s0-b1-s0", ok())), ["s0-b1-s1"]);
    assert_eq!(started(&finish(&w, &mut s, "s0-b1-s1", ok())), ["s1"]);
}

#[test]
fn parallel_first_success_aborts_the_branches_still_running() {
    let c = plan(
        json!([{"type": "parallel", "waitForAll": false, "steps": [[apply_step("a")], [apply_step("b"), apply_step("c")]]}, apply_step("after")]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    let o = finish(&w, &mut s, "s0-b0-s0", ok());
    assert_eq!(aborted(&o), ["s0-b1-s0"]);
    assert_eq!(started(&o), ["s1"]);
    assert_eq!(phase(&s, "s0-b1-s0"), Phase::Aborted);
    // The aborted branch's later step never starts, and a late result is ignored.
    assert!(started(&finish(&w, &mut s, "s0-b1-s0", ok())).is_empty());
    assert_eq!(phase(&s, "s0-b1-s0"), Phase::Aborted);
    finish(&w, &mut s, "s1", ok());
    assert_eq!(phase(&s, "s0-b1-s1"), Phase::Skipped);
    assert_eq!(s.phase, RunPhase::Succeeded);
}

#[test]
fn parallel_any_fails_when_no_branch_succeeds() {
    let c = plan(
        json!([{"type": "parallel", "waitForAll": false, "steps": [[apply_step("a")], [apply_step("b")]]}]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    finish(&w, &mut s, "s0-b0-s0", failed("x"));
    finish(&w, &mut s, "s0-b1-s0", failed("y"));
    assert_eq!(s.phase, RunPhase::Failed);
}

#[test]
fn retry_reruns_the_group_after_doubling_backoff_then_gives_up() {
    let c = plan(
        json!([{"type": "retry", "attempts": 3, "backoffSeconds": 10, "steps": [apply_step("a"), apply_step("b")]}]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(started(&w.advance(&mut s, 0)), ["s0-s0"]);
    finish(&w, &mut s, "s0-s0", ok());
    let (node, key) = split_instance_id("s0-s1");
    w.complete(&mut s, &node, &key, failed("flaky"), 100);
    // Attempt 2 waits 10 s, and its Jobs get attempt 2 (new names).
    let o = w.advance(&mut s, 105);
    assert!(started(&o).is_empty());
    assert_eq!(o.wake_at, Some(110));
    let o = w.advance(&mut s, 110);
    assert_eq!(
        o.actions,
        vec![Action::Start {
            node: "s0-s0".into(),
            key: vec![],
            attempt: 2
        }]
    );
    w.complete(&mut s, "s0-s0", &[], failed("again"), 120);
    assert_eq!(
        w.advance(&mut s, 139).wake_at,
        Some(140),
        "second backoff doubles to 20 s"
    );
    w.advance(&mut s, 140);
    w.complete(&mut s, "s0-s0", &[], failed("third"), 150);
    w.advance(&mut s, 150);
    assert_eq!(s.phase, RunPhase::Failed);
}

fn items(list: &[&str]) -> Option<Vec<(String, Value)>> {
    Some(
        list.iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), json!(v)))
            .collect(),
    )
}

#[test]
fn loop_runs_items_one_at_a_time_with_item_and_index() {
    let c = plan(
        json!([{"type": "loop", "forEach": ["x", "y"], "steps": [apply_step("${item}")]}, apply_step("after")]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(started(&w.advance(&mut s, 0)), ["s0"]);
    let o = finish(
        &w,
        &mut s,
        "s0",
        Completion {
            items: items(&["x", "y"]),
            ..ok()
        },
    );
    assert_eq!(started(&o), ["s0-s0@0"]);
    let vars = w.loop_vars(c.plan.node("s0-s0").unwrap(), &["1".into()], &s);
    assert_eq!(vars["item"], json!("y"));
    assert_eq!(vars["index"], json!(1));
    assert_eq!(started(&finish(&w, &mut s, "s0-s0@0", ok())), ["s0-s0@1"]);
    assert_eq!(started(&finish(&w, &mut s, "s0-s0@1", ok())), ["s1"]);
}

#[test]
fn empty_loop_succeeds_without_running_its_body() {
    let c = plan(
        json!([{"type": "loop", "forEach": [], "steps": [apply_step("x")]}, apply_step("after")]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    assert_eq!(
        started(&finish(
            &w,
            &mut s,
            "s0",
            Completion {
                items: Some(vec![]),
                ..ok()
            }
        )),
        ["s1"]
    );
}

fn nodes(names: &[&str]) -> Option<Vec<(String, Value)>> {
    Some(names.iter().map(|n| (n.to_string(), json!(n))).collect())
}

#[test]
fn loop_nodes_rolls_with_max_parallel_and_a_failed_node_stops_the_rollout() {
    let body = json!([{"type": "configFile", "path": "/etc/x", "content": "y"}]);
    let c = plan(json!([{"type": "loopNodes", "selector": "", "maxParallel": 2, "steps": body}]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    let o = finish(
        &w,
        &mut s,
        "s0",
        Completion {
            items: nodes(&["a", "b", "c", "d"]),
            ..ok()
        },
    );
    assert_eq!(started(&o), ["s0-s0@a", "s0-s0@b"], "two at a time");
    assert_eq!(started(&finish(&w, &mut s, "s0-s0@a", ok())), ["s0-s0@c"]);
    let o = finish(&w, &mut s, "s0-s0@b", failed("disk full"));
    assert_eq!(aborted(&o), ["s0-s0@c"], "the rollout stops");
    assert!(started(&o).is_empty(), "node d is never touched");
    assert_eq!(s.phase, RunPhase::Failed);
    assert_eq!(phase(&s, "s0-s0@d"), Phase::Pending);
}

#[test]
fn a_failed_node_in_a_loop_is_named_by_step_path_and_node_in_the_run_failure() {
    let body = json!([{"type": "log", "message": "x"}, {"type": "execNode", "cmd": "false"}]);
    let c = plan(json!([{"type": "loopNodes", "selector": "", "steps": body}]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    finish(
        &w,
        &mut s,
        "s0",
        Completion {
            items: nodes(&["a", "b"]),
            ..ok()
        },
    );
    finish(&w, &mut s, "s0-s0@a", ok());
    finish(&w, &mut s, "s0-s1@a", failed("exit code 1"));
    assert_eq!(s.phase, RunPhase::Failed);
    let (_, message) = s.failure.clone().unwrap();
    assert_eq!(message, "spec.steps[0].steps[1] [a]: exit code 1");
}

#[test]
fn node_fan_out_runs_everywhere_at_once_and_run_on_any_needs_one_success() {
    let c = plan(json!([{"type": "execNode", "cmd": "true", "runOn": "any"}]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(started(&w.advance(&mut s, 0)), ["s0"]);
    let o = finish(
        &w,
        &mut s,
        "s0",
        Completion {
            items: nodes(&["a", "b", "c"]),
            ..ok()
        },
    );
    assert_eq!(started(&o), ["s0-node@a", "s0-node@b", "s0-node@c"]);
    finish(&w, &mut s, "s0-node@a", failed("x"));
    finish(&w, &mut s, "s0-node@b", ok());
    assert_eq!(s.phase, RunPhase::Running);
    finish(&w, &mut s, "s0-node@c", failed("y"));
    assert_eq!(s.phase, RunPhase::Succeeded);
}

#[test]
fn sleep_is_a_timer_not_an_action() {
    let c = plan(json!([{"type": "sleep", "seconds": 30}, apply_step("after")]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    let o = w.advance(&mut s, 1000);
    assert!(o.actions.is_empty());
    assert_eq!(o.wake_at, Some(1030));
    assert!(started(&w.advance(&mut s, 1029)).is_empty());
    assert_eq!(started(&w.advance(&mut s, 1030)), ["s1"]);
}

#[test]
fn a_sleep_past_its_timeout_fails_when_the_timeout_is_reached() {
    let c =
        plan(json!([{"type": "sleep", "seconds": 30, "timeoutSeconds": 5}, apply_step("after")]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(w.advance(&mut s, 1000).wake_at, Some(1005));
    w.advance(&mut s, 1005);
    assert_eq!(phase(&s, "s0"), Phase::Failed);
    assert_eq!(s.phase, RunPhase::Failed);
    assert_eq!(
        s.failure,
        Some(("s0".to_string(), "timed out after 5s".to_string()))
    );
    // A timeout longer than the sleep changes nothing.
    let c = plan(json!([{"type": "sleep", "seconds": 3, "timeoutSeconds": 5}]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(w.advance(&mut s, 1000).wake_at, Some(1003));
    w.advance(&mut s, 1003);
    assert_eq!(s.phase, RunPhase::Succeeded);
}

#[test]
fn an_approval_waits_without_an_action_until_decided_or_its_timeout() {
    let gate = json!({"type": "approval", "name": "gate", "timeoutSeconds": 60});
    let c = plan(json!([gate, apply_step("after")]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    let o = w.advance(&mut s, 1000);
    assert!(o.actions.is_empty(), "nothing runs an approval: {o:?}");
    assert_eq!(o.wake_at, Some(1060));
    assert_eq!(phase(&s, "s0"), Phase::Running);
    assert_eq!(s.instances["s0"].message, "waiting for approval: gate");
    let waiting: Vec<_> = w
        .awaiting_decision(&s)
        .into_iter()
        .map(|(n, k, since)| (n.id.clone(), k, since))
        .collect();
    assert_eq!(waiting, [("s0".to_string(), vec![], 1000)]);
    // Decided: the run goes on.
    let o = finish(&w, &mut s, "s0", ok());
    assert_eq!(started(&o), ["s1"]);
    assert!(w.awaiting_decision(&s).is_empty());

    // Undecided past its timeout: the step fails, naming itself.
    let mut s = RunState::default();
    w.advance(&mut s, 1000);
    assert!(started(&w.advance(&mut s, 1059)).is_empty());
    w.advance(&mut s, 1060);
    assert_eq!(s.phase, RunPhase::Failed);
    assert_eq!(
        s.failure,
        Some((
            "s0".to_string(),
            "timed out after 60s waiting for approval: gate".to_string()
        ))
    );

    // Without timeoutSeconds it waits with no timer.
    let c = plan(json!([{"type": "approval", "name": "gate"}]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(w.advance(&mut s, 1000).wake_at, None);
    assert_eq!(phase(&s, "s0"), Phase::Running);
}

#[test]
fn state_survives_a_round_trip_through_json() {
    let c = plan(
        json!([{"type": "loopNodes", "selector": "", "steps": [{"type": "execNode", "cmd": "true"}]}]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    finish(
        &w,
        &mut s,
        "s0",
        Completion {
            items: nodes(&["a", "b"]),
            ..ok()
        },
    );
    let restored: RunState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(restored, s);
    let mut again = restored.clone();
    assert!(
        started(&w.advance(&mut again, 0)).is_empty(),
        "a restored state starts nothing twice"
    );
}

#[test]
fn a_run_timeout_fails_the_run_and_aborts_what_runs() {
    let c = plan(json!([apply_step("a"), apply_step("b")]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    let o = w.time_out(&mut s, "timed out after 5s");
    assert_eq!(aborted(&o), ["s0"]);
    assert_eq!(s.phase, RunPhase::Failed);
    assert_eq!(
        s.failure,
        Some((RUN_TIMEOUT.to_string(), "timed out after 5s".to_string()))
    );
    assert!(
        started(&w.advance(&mut s, 1)).is_empty(),
        "nothing starts after the timeout"
    );
}

#[test]
fn a_stopped_run_is_aborted_and_starts_nothing_not_even_on_error() {
    let c = plan(json!([
        apply_step("a"),
        {"type": "onError", "steps": [apply_step("undo")]},
        apply_step("b")
    ]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    let o = w.stop(&mut s, "stopped");
    assert_eq!(aborted(&o), ["s0"]);
    assert_eq!(
        s.failure,
        Some((RUN_STOPPED.to_string(), "stopped".to_string()))
    );
    let run = StoredRun {
        state: s.clone(),
        ..Default::default()
    };
    assert_eq!(
        run.outcome(),
        (pseudoflow_crd::FlowPhase::Aborted, "Aborted")
    );
    assert!(
        started(&w.advance(&mut s, 1)).is_empty(),
        "nothing starts after a stop, onError included"
    );
    assert!(
        w.stop(&mut s, "again").actions.is_empty(),
        "an ended run is not stopped twice"
    );
}

#[test]
fn a_loop_whose_items_would_pass_the_instance_limit_fails_without_starting_any() {
    // 25 body steps: the most items one loop may take (1000) would make 25,000 instances.
    let body: Vec<Value> = (0..25).map(|i| apply_step(&format!("a{i}"))).collect();
    let c = plan(json!([{"type": "loop", "forEach": "${list}", "steps": body}]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    let many: Vec<(String, Value)> = (0..pseudoflow_compiler::limits::MAX_LOOP_ITEMS)
        .map(|i| (i.to_string(), json!(i)))
        .collect();
    let o = finish(
        &w,
        &mut s,
        "s0",
        Completion {
            items: Some(many),
            ..ok()
        },
    );
    assert!(started(&o).is_empty(), "{:?}", o.actions);
    assert_eq!(phase(&s, "s0"), Phase::Failed);
    assert_eq!(s.phase, RunPhase::Failed);
    let msg = &s.instances["s0"].message;
    assert!(msg.contains(&MAX_INSTANCES.to_string()), "{msg}");
    assert!(s.instances.len() < 10, "no item was instantiated");
}

#[test]
fn a_loop_given_more_items_than_one_loop_may_run_fails_naming_the_step() {
    let c = plan(json!([{"type": "loop", "forEach": "${list}", "steps": [apply_step("a")]}]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    let items: Vec<(String, Value)> = (0..=pseudoflow_compiler::limits::MAX_LOOP_ITEMS)
        .map(|i| (i.to_string(), json!(i)))
        .collect();
    let o = finish(
        &w,
        &mut s,
        "s0",
        Completion {
            items: Some(items),
            ..ok()
        },
    );
    assert!(started(&o).is_empty(), "{:?}", o.actions);
    assert_eq!(s.phase, RunPhase::Failed);
    let msg = &s.instances["s0"].message;
    assert!(
        msg.contains("spec.steps[0]") && msg.contains("1001 items"),
        "{msg}"
    );
}

#[test]
fn loops_together_may_not_take_more_iterations_than_a_run_may_run() {
    // An outer loop of 11 items over an inner loop: each inner loop takes the most it may.
    let c = plan(
        json!([{"type": "loop", "forEach": "${outer}", "maxParallel": 20, "steps": [
            {"type": "loop", "forEach": "${inner}", "steps": [apply_step("a")]}
        ]}]),
    );
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    let items =
        |n: usize| -> Vec<(String, Value)> { (0..n).map(|i| (i.to_string(), json!(i))).collect() };
    finish(
        &w,
        &mut s,
        "s0",
        Completion {
            items: Some(items(11)),
            ..ok()
        },
    );
    let inner = pseudoflow_compiler::limits::MAX_LOOP_ITEMS;
    let mut failed = None;
    for outer in 0..11 {
        let key = vec![outer.to_string()];
        w.advance(&mut s, 0);
        let id = crate::instance_id("s0-s0", &key);
        if !s.instances.contains_key(&id) {
            continue;
        }
        w.complete(
            &mut s,
            "s0-s0",
            &key,
            Completion {
                items: Some(items(inner)),
                ..ok()
            },
            0,
        );
        if s.phase == RunPhase::Failed {
            failed = Some(s.instances[&id].message.clone());
            break;
        }
    }
    let msg = failed.expect("the run failed before all iterations were taken");
    assert!(msg.contains("loop iterations"), "{msg}");
}

#[test]
fn a_huge_step_message_is_kept_bounded_in_the_run_state() {
    let c = plan(json!([apply_step("a")]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    w.advance(&mut s, 0);
    finish(&w, &mut s, "s0", failed(&"x".repeat(1_000_000)));
    let kept = &s.instances["s0"].message;
    assert_eq!(kept.chars().count(), MAX_INSTANCE_MESSAGE_CHARS);
    assert!(kept.ends_with('…'));
    let (_, why) = s.failure.as_ref().unwrap();
    assert!(
        why.chars().count() <= MAX_INSTANCE_MESSAGE_CHARS,
        "{}",
        why.len()
    );
}

#[test]
fn ending_a_run_aborts_what_runs_and_records_the_cause() {
    let c = plan(json!([{"type": "parallel", "steps": [[apply_step("a")], [apply_step("b")]]}]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    let running = started(&w.advance(&mut s, 0));
    assert_eq!(running.len(), 2, "{running:?}");
    let mut aborted: Vec<String> = s
        .end_failed("run-state", "too large")
        .iter()
        .map(|(n, k)| instance_id(n, k))
        .collect();
    aborted.sort();
    assert_eq!(aborted, running);
    assert_eq!(s.phase, RunPhase::Failed);
    assert_eq!(s.failure, Some(("run-state".into(), "too large".into())));
    assert!(running.iter().all(|id| phase(&s, id) == Phase::Aborted));
}

#[test]
fn a_loop_past_its_timeout_stops_its_body_and_fails_and_continue_on_error_goes_on() {
    let c = plan(json!([
        {"type": "loop", "forEach": ["x", "y"], "timeoutSeconds": 30, "continueOnError": true,
         "steps": [apply_step("${item}")]},
        apply_step("after")
    ]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(started(&w.advance(&mut s, 0)), ["s0"]);
    let o = finish(
        &w,
        &mut s,
        "s0",
        Completion {
            items: items(&["x", "y"]),
            ..ok()
        },
    );
    assert_eq!(started(&o), ["s0-s0@0"]);
    let o = w.advance(&mut s, 29);
    assert!(o.actions.is_empty(), "{o:?}");
    assert_eq!(o.wake_at, Some(30), "woken when the loop's time is up");
    let o = w.advance(&mut s, 30);
    assert_eq!(aborted(&o), ["s0-s0@0"], "what ran inside is stopped");
    assert_eq!(started(&o), ["s1"], "continueOnError: the flow goes on");
    assert_eq!(phase(&s, "s0-end"), Phase::Failed);
    assert_eq!(
        s.instances["s0-end"].message,
        "timed out after 30s (its timeoutSeconds)"
    );
    assert!(
        !matches!(phase(&s, "s0-s0@1"), Phase::Running | Phase::Succeeded),
        "the next item never ran"
    );
}

#[test]
fn a_retry_timeout_covers_every_attempt_and_fails_the_run_naming_it() {
    let c = plan(json!([
        {"type": "retry", "attempts": 5, "backoffSeconds": 10, "timeoutSeconds": 50,
         "steps": [apply_step("a")]}
    ]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(started(&w.advance(&mut s, 0)), ["s0-s0"]);
    w.complete(&mut s, "s0-s0", &[], failed("flaky"), 20);
    assert!(started(&w.advance(&mut s, 20)).is_empty(), "backing off");
    assert_eq!(started(&w.advance(&mut s, 30)), ["s0-s0"], "attempt 2");
    let o = w.advance(&mut s, 50);
    assert_eq!(aborted(&o), ["s0-s0"], "attempt 2 is stopped");
    assert_eq!(s.phase, RunPhase::Failed);
    let (_, why) = s.failure.clone().unwrap();
    assert!(why.contains("timed out after 50s"), "{why}");
}

#[test]
fn a_parallel_past_its_timeout_stops_every_branch() {
    let c = plan(json!([
        {"type": "parallel", "timeoutSeconds": 5,
         "steps": [[apply_step("a")], [apply_step("b")]]}
    ]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    let o = w.advance(&mut s, 0);
    assert_eq!(started(&o).len(), 2, "{o:?}");
    let mut stopped = aborted(&w.advance(&mut s, 5));
    stopped.sort();
    let mut both = started(&o);
    both.sort();
    assert_eq!(stopped, both);
    assert_eq!(s.phase, RunPhase::Failed);
}

#[test]
fn a_node_fan_out_times_each_node_not_the_whole_rollout() {
    let c = plan(json!([
        {"type": "execNode", "cmd": "true", "nodeSelector": "role=x", "timeoutSeconds": 10}
    ]));
    let w = Walker::new(&c.plan);
    let mut s = RunState::default();
    assert_eq!(started(&w.advance(&mut s, 0)), ["s0"]);
    finish(
        &w,
        &mut s,
        "s0",
        Completion {
            items: nodes(&["n1", "n2"]),
            ..ok()
        },
    );
    let o = w.advance(&mut s, 1000);
    assert!(aborted(&o).is_empty(), "{o:?}");
    assert_eq!(
        s.phase,
        RunPhase::Running,
        "the Jobs' own deadlines time each node"
    );
}

#[test]
fn a_held_walk_starts_nothing_new_but_lets_running_work_finish_and_resumes_where_it_stopped() {
    let c = plan(json!([apply_step("a"), apply_step("b")]));
    let mut s = RunState::default();
    assert_eq!(started(&Walker::new(&c.plan).advance(&mut s, 0)), ["s0"]);
    let held = Walker::new(&c.plan).holding(true);
    let o = finish(&held, &mut s, "s0", ok());
    assert!(started(&o).is_empty(), "{o:?}");
    assert_eq!(
        phase(&s, "s0"),
        Phase::Succeeded,
        "running work is folded in"
    );
    assert_eq!(phase(&s, "s1"), Phase::Pending);
    assert_eq!(s.phase, RunPhase::Running);
    let resumed = Walker::new(&c.plan).holding(false);
    assert_eq!(started(&resumed.advance(&mut s, 0)), ["s1"]);
}
