//! The status a person, `kubectl wait` and Argo CD read, folded from the run state: phase,
//! reason, message, standard conditions, progress, the current step and a bounded step list.
//! Built as the typed [`PseudoFlowStatus`] of the CRD, so its shape is defined once.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use pseudoflow_compiler::plan::{NodeKind, Plan, PlanNode};
use pseudoflow_crd::common::RunOn;
use pseudoflow_crd::status::{InstanceCounts, PreviousRun, RunStatus, MAX_STEP_ENTRIES};
use pseudoflow_crd::{FlowPhase, PseudoFlowStatus, StepStatus};
use serde_json::Value;

use crate::limits::{bounded, MAX_STATUS_MESSAGE_CHARS, MAX_STEP_MESSAGE_CHARS};
use pseudoflow_walk::{instance_id, split_instance_id, Instance, Phase, RunPhase, StoredRun};

/// Unix seconds as the API's time (the epoch for a time it cannot represent).
pub fn time(unix: i64) -> Time {
    Time(Timestamp::from_second(unix).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// One standard condition, keeping `lastTransitionTime` when the status did not change.
pub(crate) fn condition(
    previous: &Value,
    ty: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: i64,
    now: i64,
) -> Condition {
    let st = if status { "True" } else { "False" };
    let prev = previous
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == ty));
    let since = match prev {
        Some(p) if p["status"] == st => p["lastTransitionTime"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map(Time)
            .unwrap_or_else(|| time(now)),
        _ => time(now),
    };
    Condition {
        type_: ty.to_string(),
        status: st.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: Some(generation),
        last_transition_time: since,
    }
}

/// Status for an invalid spec: nothing ran.
pub fn invalid(previous: &Value, generation: i64, message: &str, now: i64) -> PseudoFlowStatus {
    not_run(previous, generation, "InvalidSpec", message, now)
}

/// Status for a flow that failed before (or instead of) its run: an invalid spec, or an
/// internal error while reconciling it. Merged into the stored status, it keeps what the last
/// run showed (its steps, its run).
pub fn not_run(
    previous: &Value,
    generation: i64,
    reason: &str,
    message: &str,
    now: i64,
) -> PseudoFlowStatus {
    let message = bounded(message, MAX_STATUS_MESSAGE_CHARS);
    let message = message.as_str();
    // An invalid spec never ran; an internal error may have struck mid-run.
    let progressing = if reason == "InvalidSpec" {
        "no step ran"
    } else {
        message
    };
    let conds = &previous["conditions"];
    PseudoFlowStatus {
        observed_generation: Some(generation),
        phase: Some(FlowPhase::Failed),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        conditions: vec![
            condition(conds, "Ready", false, reason, message, generation, now),
            condition(
                conds,
                "Progressing",
                false,
                reason,
                progressing,
                generation,
                now,
            ),
            condition(conds, "Degraded", true, reason, message, generation, now),
        ],
        ..Default::default()
    }
}

/// Status `phase: Failed` with `reason` and `message`, nothing else changed (merged into the
/// stored status).
pub fn failed_with(reason: &str, message: &str) -> PseudoFlowStatus {
    PseudoFlowStatus {
        phase: Some(FlowPhase::Failed),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        ..Default::default()
    }
}

/// Status naming a run that waits (merged into the stored status).
pub fn queued(id: &str, generation: i64) -> PseudoFlowStatus {
    PseudoFlowStatus {
        queued_run: Some(queued_run(id, generation)),
        ..Default::default()
    }
}

fn queued_run(id: &str, generation: i64) -> RunStatus {
    RunStatus {
        id: id.to_string(),
        generation,
        ..Default::default()
    }
}

/// A running run held by `spec.suspend`: reason Suspended, and the message says so first.
pub fn held(status: &mut PseudoFlowStatus) {
    status.reason = Some("Suspended".into());
    let progress = status.progress.clone().unwrap_or_default();
    let running = match status.current_step.as_deref() {
        Some(step) if !step.is_empty() => format!(", {step} still running"),
        _ => String::new(),
    };
    status.message = Some(bounded(
        &format!("suspended: {progress} steps done{running}; no new step starts until spec.suspend is false"),
        MAX_STATUS_MESSAGE_CHARS,
    ));
}

/// Whether `previous` already says Failed with `reason` for `generation` (so reporting it again
/// would only repeat an Event).
pub fn already_failed(previous: &Value, generation: i64, reason: &str) -> bool {
    previous["reason"] == reason && previous["observedGeneration"] == serde_json::json!(generation)
}

/// `status` as a JSON merge patch (what [`super::outcome::patch_status`] takes).
pub fn to_patch(status: &PseudoFlowStatus) -> Value {
    serde_json::to_value(status).expect("a status serialises")
}

/// The merge patch that replaces `previous` with `status`: `status`, plus a null for every field
/// `previous` has and `status` does not (at the top, in `run` and in `bound`), since null is what
/// deletes a field in a merge patch (a queued run that started, a current step that finished, a
/// bound flow's failures mended).
pub fn replacing(previous: &Value, status: &PseudoFlowStatus) -> Value {
    let mut patch = to_patch(status);
    null_missing(previous, &mut patch);
    for nested in ["run", "bound"] {
        if let (Some(prev), Some(now)) = (previous.get(nested), patch.get_mut(nested)) {
            null_missing(prev, now);
        }
    }
    patch
}

fn null_missing(previous: &Value, patch: &mut Value) {
    let (Some(previous), Some(patch)) = (previous.as_object(), patch.as_object_mut()) else {
        return;
    };
    // `warnings` is the compile's, written by crate::serve::warnings, not by the run's status.
    for key in previous.keys().filter(|k| *k != "warnings") {
        patch.entry(key.clone()).or_insert(Value::Null);
    }
}

/// `status` as the API server stores it after a merge patch (null fields removed, at any depth),
/// to tell whether a patch would change anything.
pub fn without_nulls(status: &Value) -> Value {
    match status {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Status for a run.
pub fn of_run(
    previous: &Value,
    plan: &Plan,
    run: &StoredRun,
    generation: i64,
    queued: Option<(&str, i64)>,
    now: i64,
) -> PseudoFlowStatus {
    let (phase, reason) = phase_of(run);
    let by_node = instances_by_node(run);
    let work_nodes: Vec<&PlanNode> = plan
        .nodes()
        .filter(|n| n.step.is_some() && !matches!(n.kind, NodeKind::CompoundEnd { .. }))
        .collect();
    let (done, total) = progress(run, &work_nodes, &by_node);
    let current_step = current_step(plan, run);
    let awaiting = awaiting_decision(plan, run);
    let reason = if awaiting.is_some() {
        "WaitingForApproval"
    } else {
        reason
    };
    let message = match (&run.state.failure, run.state.phase) {
        (Some(failure), _) => failure_message(plan, failure),
        (None, RunPhase::Succeeded) => format!("{done}/{total} steps done"),
        (None, _) if awaiting.is_some() => awaiting.unwrap_or_default(),
        (None, _) => format!(
            "{done}/{total} steps done; running {}",
            current_step.clone().unwrap_or_default()
        ),
    };
    let message = bounded(&message, MAX_STATUS_MESSAGE_CHARS);
    let mut steps = step_entries(plan, run, &work_nodes, &by_node);
    let omitted = steps.len().saturating_sub(MAX_STEP_ENTRIES);
    steps.truncate(MAX_STEP_ENTRIES);
    let conds = &previous["conditions"];
    let succeeded = run.state.phase == RunPhase::Succeeded;
    let failed = run.state.phase == RunPhase::Failed;
    let condition = |ty, status| condition(conds, ty, status, reason, &message, generation, now);
    PseudoFlowStatus {
        observed_generation: Some(generation),
        last_run_time: Some(time(run.started_at)),
        phase: Some(phase),
        reason: Some(reason.to_string()),
        message: Some(message.clone()),
        conditions: vec![
            condition("Ready", succeeded),
            condition("Progressing", !succeeded && !failed),
            condition("Degraded", failed),
        ],
        run: Some(RunStatus {
            id: run.run_id.clone(),
            generation: run.generation,
            trigger: run.trigger.clone(),
            started_at: Some(time(run.started_at)),
            finished_at: run.finished_at.map(time),
            retry_of: run.retry_of.clone(),
            retried_from: run.retried_from.clone(),
        }),
        progress: Some(format!("{done}/{total}")),
        current_step,
        steps,
        steps_omitted: Some(omitted as u32).filter(|n| *n > 0),
        queued_run: queued.map(|(id, generation)| queued_run(id, generation)),
        // Set by the reconcile for a scheduled flow (reconcile/schedule.rs).
        last_schedule_time: None,
        next_schedule_time: None,
        previous_runs: previous_runs(run),
        bound: None,
        // Set by the reconcile: the run state's sequence number it stored (reconcile/seal.rs).
        run_state_sequence: None,
        warnings: Vec::new(),
    }
}

/// The flow's phase and reason from its run's (see [`StoredRun::outcome`]).
fn phase_of(run: &StoredRun) -> (FlowPhase, &'static str) {
    run.outcome()
}

/// `status.previousRuns` from the run's history.
fn previous_runs(run: &StoredRun) -> Vec<PreviousRun> {
    run.previous
        .iter()
        .map(|ended| PreviousRun {
            id: ended.run_id.clone(),
            phase: ended.phase,
            reason: ended.reason.clone(),
            started_at: Some(time(ended.started_at)),
            finished_at: ended.finished_at.map(time),
        })
        .collect()
}

/// What the first `approval` step waiting for a decision says ("waiting for approval: NAME").
fn awaiting_decision(plan: &Plan, run: &StoredRun) -> Option<String> {
    if run.state.phase != RunPhase::Running {
        return None;
    }
    run.state
        .instances
        .iter()
        .filter(|(_, i)| i.phase == Phase::Running)
        .find(|(id, _)| {
            plan.node(&split_instance_id(id).0)
                .is_some_and(pseudoflow_walk::awaits_decision)
        })
        .map(|(_, i)| i.message.clone())
}

/// The run's instances grouped by their node's id.
fn instances_by_node(run: &StoredRun) -> BTreeMap<String, Vec<&Instance>> {
    let mut by_node: BTreeMap<String, Vec<&Instance>> = BTreeMap::new();
    for (id, inst) in &run.state.instances {
        by_node
            .entry(split_instance_id(id).0)
            .or_default()
            .push(inst);
    }
    by_node
}

/// How many step instances have settled, of how many (a node not started yet counts once).
fn progress(
    run: &StoredRun,
    work_nodes: &[&PlanNode],
    by_node: &BTreeMap<String, Vec<&Instance>>,
) -> (usize, usize) {
    let done = run
        .state
        .instances
        .iter()
        .filter(|(id, i)| {
            i.phase.settled() && work_nodes.iter().any(|n| n.id == split_instance_id(id).0)
        })
        .count();
    let total = work_nodes
        .iter()
        .map(|n| by_node.get(&n.id).map_or(1, |v| v.len().max(1)))
        .sum::<usize>();
    (done, total)
}

/// The step running now (else the one that failed the run), named for people: its name, else
/// its path and type, with its loop item.
fn current_step(plan: &Plan, run: &StoredRun) -> Option<String> {
    let label = |id: &str| {
        plan.node(id)
            .map(|n| {
                n.name
                    .clone()
                    .unwrap_or_else(|| format!("{} ({})", n.path, n.step_type))
            })
            .unwrap_or_else(|| id.to_string())
    };
    let current = run
        .state
        .instances
        .iter()
        .find(|(_, i)| i.phase == Phase::Running)
        .map(|(id, _)| id.clone())
        .or_else(|| run.state.failure.as_ref().map(|(id, _)| id.clone()))?;
    let (node, key) = split_instance_id(&current);
    Some(step_at(&label(&node), &key))
}

/// One entry per step that has instances, in plan order (unbounded: the caller truncates).
fn step_entries(
    plan: &Plan,
    run: &StoredRun,
    work_nodes: &[&PlanNode],
    by_node: &BTreeMap<String, Vec<&Instance>>,
) -> Vec<StepStatus> {
    // A structural step is shown by its opening node, but its outcome is its closing node's:
    // a loop whose body failed (or timed out) is Failed, not "Succeeded: 3 items".
    let closing: BTreeMap<&str, &str> = plan
        .nodes()
        .filter_map(|n| match &n.kind {
            NodeKind::CompoundEnd { start, .. } => Some((start.as_str(), n.id.as_str())),
            _ => None,
        })
        .collect();
    let mut steps = Vec::new();
    for n in work_nodes {
        let insts: Vec<Instance> = match closing.get(n.id.as_str()) {
            Some(end) => whole_of(run, &n.id, end),
            None => by_node
                .get(&n.id)
                .map(|v| v.iter().map(|i| (*i).clone()).collect())
                .unwrap_or_default(),
        };
        if !insts.is_empty() {
            let mut entry = step_entry(plan, n, &insts);
            // What an include ran, as its `digest:` would pin it.
            entry.digest = run.includes.get(&n.id).map(|i| i.digest());
            steps.push(entry);
        }
    }
    steps
}

/// The status entry of step `n` from its (non-empty) instances: one instance's details, or
/// counts of many.
fn step_entry(plan: &Plan, n: &PlanNode, insts: &[Instance]) -> StepStatus {
    let count = |p: Phase| insts.iter().filter(|i| i.phase == p).count() as u32;
    let mut entry = StepStatus {
        id: n.id.clone(),
        path: n.path.clone(),
        step_type: n.step_type.clone(),
        name: n.name.clone(),
        phase: step_phase(plan, n, insts),
        started_at: None,
        finished_at: None,
        message: None,
        changed: None,
        attempt: None,
        node: None,
        instances: None,
        approval: None,
        digest: None,
    };
    if let [i] = insts {
        if !i.message.is_empty() {
            entry.message = Some(bounded(&i.message, MAX_STEP_MESSAGE_CHARS));
        }
        if i.phase.settled() && i.phase != Phase::Skipped {
            entry.changed = Some(i.changed);
        }
        entry.started_at = i.started_at.map(time);
        entry.finished_at = i.finished_at.filter(|_| i.phase.settled()).map(time);
        entry.attempt = Some(i.attempt).filter(|a| *a > 1);
        entry.approval = i.approval.clone();
    } else {
        entry.changed = Some(insts.iter().any(|i| i.changed));
        entry.instances = Some(InstanceCounts {
            total: insts.len() as u32,
            succeeded: count(Phase::Succeeded),
            failed: count(Phase::Failed),
            running: count(Phase::Running),
            skipped: count(Phase::Skipped),
        });
    }
    entry
}

/// One phase for a step from its instances': running while any runs, then failed if any
/// failed (unless one success is enough), aborted, succeeded, skipped when all were.
fn step_phase(plan: &Plan, n: &PlanNode, insts: &[Instance]) -> Phase {
    let count = |p: Phase| insts.iter().filter(|i| i.phase == p).count();
    if count(Phase::Running) > 0 {
        Phase::Running
    } else if tolerates_failures(plan, n) && count(Phase::Succeeded) > 0 {
        // `runOn: any`: one node's success is the step's; the failures are counted.
        Phase::Succeeded
    } else if count(Phase::Failed) > 0 {
        Phase::Failed
    } else if count(Phase::Aborted) > 0 {
        Phase::Aborted
    } else if count(Phase::Succeeded) > 0 {
        Phase::Succeeded
    } else if count(Phase::Skipped) == insts.len() {
        Phase::Skipped
    } else {
        Phase::Pending
    }
}

/// Whether `node`'s instances join an any-of end (`runOn: any`), where the step succeeds when
/// one of them does — as the run does: the walker lets the join decide.
fn tolerates_failures(plan: &Plan, node: &PlanNode) -> bool {
    node.parent
        .as_deref()
        .and_then(|end| plan.node(end))
        .is_some_and(|end| {
            matches!(
                end.kind,
                NodeKind::CompoundEnd {
                    run_on: Some(RunOn::Any),
                    ..
                }
            )
        })
}

/// The instances of structural step `start` as a whole, up to its closing node `end`: Running
/// while its body runs, then ending as the closing node did (with its message, if it says one).
fn whole_of(run: &StoredRun, start: &str, end: &str) -> Vec<Instance> {
    run.state
        .instances
        .iter()
        .filter(|(id, _)| split_instance_id(id).0 == start)
        .map(|(id, opened)| {
            let mut whole = opened.clone();
            let key = split_instance_id(id).1;
            let closed = run.state.instances.get(&instance_id(end, &key));
            match closed {
                Some(c) if c.phase.settled() => {
                    whole.phase = c.phase;
                    whole.finished_at = c.finished_at;
                    whole.changed |= c.changed;
                    if !c.message.is_empty() {
                        whole.message = c.message.clone();
                    }
                }
                _ if opened.phase == Phase::Succeeded => {
                    whole.phase = Phase::Running;
                    whole.finished_at = None;
                }
                _ => {}
            }
            whole
        })
        .collect()
}

/// Where a step instance is, for people: its path, and the loop item of a loop's instance.
pub(crate) fn step_at(path: &str, key: &[String]) -> String {
    if key.is_empty() {
        path.to_string()
    } else {
        format!("{path} [{}]", key.join("/"))
    }
}

/// A run's failure (node instance id, message) as status and the `RunFailed` Event tell it:
/// led by the step's path in the flow (`spec.steps[1] [0]: ...`), never the internal node id.
pub(crate) fn failure_message(plan: &Plan, (id, msg): &(String, String)) -> String {
    let (node, key) = split_instance_id(id);
    let path = plan.node(&node).map(|n| n.path.clone()).unwrap_or(node);
    said_at(&step_at(&path, &key), msg)
}

/// `msg` said of the step at `at`: prefixed with it, unless the message already leads with it
/// (API errors do) or with a nested step's path (a failed group) or one of its instances (a node
/// fan-out's `spec.steps[0] [edge-1]: ...`); naming it twice helps nobody.
pub(crate) fn said_at(at: &str, msg: &str) -> String {
    let named = msg
        .strip_prefix(at)
        .is_some_and(|rest| rest.starts_with([':', '.', '[']) || rest.starts_with(" ["));
    if named {
        msg.to_string()
    } else {
        format!("{at}: {msg}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use pseudoflow_walk::RUN_STATE_TOO_LARGE;

    /// A bound flow's summary loses a field it had (its last failure mended, a revision no
    /// longer current): the patch nulls it, or the merge would keep the old value for ever.
    #[test]
    fn a_field_the_bound_summary_no_longer_has_is_removed() {
        let previous = json!({"phase": "Succeeded", "bound": {"objects": 1, "creating": 0,
            "running": 0, "failed": 1, "failures": [{"object": "ns/a", "message": "boom"}],
            "currentRevision": "f-h1", "revisions": [{"revision": 1, "name": "f-h1", "objects": 1}]}});
        let status = PseudoFlowStatus {
            phase: Some(FlowPhase::Succeeded),
            bound: Some(pseudoflow_crd::status::BoundSummary {
                objects: 1,
                running: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        let patch = replacing(&previous, &status);
        assert_eq!(
            patch["bound"],
            json!({"objects": 1, "creating": 0, "running": 1, "failed": 0,
                "failures": null, "currentRevision": null, "revisions": null})
        );
    }

    #[test]
    fn a_new_status_deletes_what_the_last_one_said_and_no_longer_holds() {
        let previous = json!({
            "phase": "Running",
            "currentStep": "spec.steps[0]",
            "queuedRun": {"id": "r2", "generation": 2},
            "run": {"id": "r1", "generation": 1, "trigger": "again", "startedAt": "2026-01-01T00:00:00Z"},
        });
        let status = PseudoFlowStatus {
            phase: Some(FlowPhase::Succeeded),
            run: Some(RunStatus {
                id: "r2".into(),
                generation: 2,
                started_at: Some(time(1_767_225_600)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let patch = replacing(&previous, &status);
        assert_eq!(
            patch,
            json!({
                "phase": "Succeeded",
                "currentStep": null,
                "queuedRun": null,
                "run": {"id": "r2", "generation": 2, "trigger": null, "startedAt": "2026-01-01T00:00:00Z"},
            })
        );
        assert_eq!(
            without_nulls(&patch)["run"],
            json!({"id": "r2", "generation": 2, "startedAt": "2026-01-01T00:00:00Z"})
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let previous = json!([
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Degraded", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ]);
        let later = 1_767_225_600 + 60;
        let ready = condition(&previous, "Ready", false, "Running", "", 1, later);
        let degraded = condition(&previous, "Degraded", true, "StepFailed", "", 1, later);
        let json = serde_json::to_value([ready, degraded]).unwrap();
        assert_eq!(json[0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(json[1]["lastTransitionTime"], "2026-01-01T00:01:00Z");
        assert_eq!(json[1]["observedGeneration"], 1);
    }

    #[test]
    fn status_messages_are_bounded_with_an_ellipsis() {
        let huge = "y".repeat(100_000);
        let st = to_patch(&not_run(&Value::Null, 3, "InternalError", &huge, 0));
        let msg = st["message"].as_str().unwrap();
        assert_eq!(msg.chars().count(), MAX_STATUS_MESSAGE_CHARS);
        assert!(msg.ends_with('…'));
        for c in st["conditions"].as_array().unwrap() {
            assert!(c["message"].as_str().unwrap().chars().count() <= MAX_STATUS_MESSAGE_CHARS);
        }
        assert_eq!(st["reason"], "InternalError");
        assert!(already_failed(&st, 3, "InternalError"));
        assert!(!already_failed(&st, 4, "InternalError"));
        assert!(!already_failed(&st, 3, "InvalidSpec"));
    }

    #[test]
    fn a_run_failed_for_its_state_size_says_so_in_reason_and_bounded_message() {
        let c = pseudoflow_compiler::compile(
            &pseudoflow_compiler::FlowId {
                name: "f",
                namespace: Some("ns"),
            },
            &json!({"steps": [{"type": "log", "message": "x"}]}),
        )
        .unwrap();
        let mut run = StoredRun::default();
        run.state
            .end_failed(RUN_STATE_TOO_LARGE, &"z".repeat(50_000));
        let st = to_patch(&of_run(&Value::Null, &c.plan, &run, 1, None, 0));
        assert_eq!(st["phase"], "Failed");
        assert_eq!(st["reason"], "RunStateTooLarge");
        let msg = st["message"].as_str().unwrap();
        assert!(msg.starts_with(RUN_STATE_TOO_LARGE), "{msg:.80}");
        assert_eq!(msg.chars().count(), MAX_STATUS_MESSAGE_CHARS);
    }

    #[test]
    fn a_waiting_approval_is_the_reason_and_message_and_its_decider_is_recorded() {
        let c = pseudoflow_compiler::compile(
            &pseudoflow_compiler::FlowId {
                name: "f",
                namespace: Some("ns"),
            },
            &json!({"steps": [{"type": "approval", "name": "gate"}]}),
        )
        .unwrap();
        let walker = pseudoflow_walk::Walker::new(&c.plan);
        let mut run = StoredRun::default();
        walker.advance(&mut run.state, 100);
        let st = to_patch(&of_run(&Value::Null, &c.plan, &run, 1, None, 100));
        assert_eq!(st["phase"], "Running");
        assert_eq!(st["reason"], "WaitingForApproval");
        assert_eq!(st["message"], "waiting for approval: gate");
        let record = pseudoflow_crd::status::ApprovalRecord {
            decision: "Approved".into(),
            user: "boss".into(),
            groups: vec!["ops".into()],
            time: time(120),
        };
        run.state.entry("s0", &[]).approval = Some(record);
        let done = pseudoflow_walk::Completion {
            ok: true,
            message: "approved by boss".into(),
            ..Default::default()
        };
        walker.complete(&mut run.state, "s0", &[], done, 120);
        walker.advance(&mut run.state, 120);
        let st = to_patch(&of_run(&Value::Null, &c.plan, &run, 1, None, 120));
        assert_eq!(st["phase"], "Succeeded");
        assert_eq!(st["steps"][0]["approval"]["user"], "boss");
        assert_eq!(st["steps"][0]["approval"]["groups"], json!(["ops"]));
        assert_eq!(st["steps"][0]["approval"]["time"], "1970-01-01T00:02:00Z");
    }

    #[test]
    fn a_failure_is_told_by_the_step_path_not_the_node_id() {
        let c = pseudoflow_compiler::compile(
            &pseudoflow_compiler::FlowId {
                name: "f",
                namespace: Some("ns"),
            },
            &json!({"steps": [{"type": "log", "message": "x"},
                {"type": "loop", "forEach": ["a"], "steps": [{"type": "sleep", "seconds": 1}]}]}),
        )
        .unwrap();
        // The loop's end node (`s1-end`) records what its failed item said.
        let failure = (
            "s1-end".to_string(),
            "spec.steps[1].steps[0] [0]: boom".to_string(),
        );
        assert_eq!(
            failure_message(&c.plan, &failure),
            "spec.steps[1].steps[0] [0]: boom"
        );
        let failure = ("s1-end".to_string(), "cancelled".to_string());
        assert_eq!(
            failure_message(&c.plan, &failure),
            "spec.steps[1]: cancelled"
        );
        let failure = ("s1-s0@0".to_string(), "timed out".to_string());
        assert_eq!(
            failure_message(&c.plan, &failure),
            "spec.steps[1].steps[0] [0]: timed out"
        );
    }

    #[test]
    fn only_a_run_on_any_fan_out_tolerates_failed_nodes() {
        let work_node = |run_on: &str| {
            let c = pseudoflow_compiler::compile(
                &pseudoflow_compiler::FlowId {
                    name: "f",
                    namespace: Some("ns"),
                },
                &json!({"steps": [{"type": "execNode", "nodeSelector": "", "runOn": run_on, "cmd": "true"}]}),
            )
            .unwrap();
            let node = c
                .plan
                .nodes()
                .find(|n| n.step_type == "execNode" && n.parent.is_some())
                .expect("the fan-out's work node")
                .clone();
            tolerates_failures(&c.plan, &node)
        };
        assert!(work_node("any"));
        assert!(!work_node("all"));
        assert!(!work_node("first"));
    }

    #[test]
    fn a_step_is_named_once_in_what_is_said_of_it() {
        let at = step_at("spec.steps[0]", &[]);
        assert_eq!(said_at(&at, "timed out"), "spec.steps[0]: timed out");
        assert_eq!(
            said_at(&at, "spec.steps[0]: forbidden: x"),
            "spec.steps[0]: forbidden: x"
        );
        assert_eq!(
            said_at(&at, "spec.steps[0].steps[1][0]: exit 4"),
            "spec.steps[0].steps[1][0]: exit 4"
        );
        // Another step whose path merely starts alike is still prefixed.
        assert_eq!(
            said_at(&at, "spec.steps[0]1 oddity"),
            "spec.steps[0]: spec.steps[0]1 oddity"
        );
        assert_eq!(
            said_at(&at, "spec.steps[0] [edge-1]: node edge-1 is NotReady"),
            "spec.steps[0] [edge-1]: node edge-1 is NotReady",
            "a fan-out's failure names its instance"
        );
        let item = step_at("spec.steps[2].steps[0]", &["worker-0".into()]);
        assert_eq!(item, "spec.steps[2].steps[0] [worker-0]");
        assert_eq!(
            said_at(&item, "failed"),
            "spec.steps[2].steps[0] [worker-0]: failed"
        );
    }
}
