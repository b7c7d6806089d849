//! The status a person, `kubectl wait` and Argo CD read, folded from the run state: phase,
//! reason, message, standard conditions, progress, the current step and a bounded step list.

use std::collections::BTreeMap;

use pseudoflow_compiler::plan::{NodeKind, Plan};
use pseudoflow_crd::status::MAX_STEP_ENTRIES;
use serde_json::{json, Value};

use super::size::RUN_STATE_TOO_LARGE;
use super::store::StoredRun;
use crate::limits::{bounded, MAX_STATUS_MESSAGE_CHARS, MAX_STEP_MESSAGE_CHARS};
use crate::walk::{split_instance_id, Phase, RunPhase};

/// Unix seconds as RFC 3339.
pub fn rfc3339(unix: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(unix)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// One standard condition, keeping `lastTransitionTime` when the status did not change.
fn condition(
    previous: &Value,
    ty: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: i64,
    now: &str,
) -> Value {
    let st = if status { "True" } else { "False" };
    let prev = previous
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == ty));
    let since = match prev {
        Some(p) if p["status"] == st => p["lastTransitionTime"].as_str().unwrap_or(now).to_string(),
        _ => now.to_string(),
    };
    json!({"type": ty, "status": st, "reason": reason, "message": message, "observedGeneration": generation, "lastTransitionTime": since})
}

/// Status for an invalid spec: nothing ran.
pub fn invalid(previous: &Value, generation: i64, message: &str, now: &str) -> Value {
    not_run(previous, generation, "InvalidSpec", message, now)
}

/// Status for a flow that failed before (or instead of) its run: an invalid spec, or an
/// internal error while reconciling it.
pub fn not_run(previous: &Value, generation: i64, reason: &str, message: &str, now: &str) -> Value {
    let message = bounded(message, MAX_STATUS_MESSAGE_CHARS);
    let message = message.as_str();
    // An invalid spec never ran; an internal error may have struck mid-run.
    let progressing = if reason == "InvalidSpec" {
        "no step ran"
    } else {
        message
    };
    let conds = &previous["conditions"];
    json!({
        "observedGeneration": generation,
        "phase": "Failed",
        "reason": reason,
        "message": message,
        "conditions": [
            condition(conds, "Ready", false, reason, message, generation, now),
            condition(conds, "Progressing", false, reason, progressing, generation, now),
            condition(conds, "Degraded", true, reason, message, generation, now),
        ],
    })
}

/// Whether `previous` already says Failed with `reason` for `generation` (so reporting it again
/// would only repeat an Event).
pub fn already_failed(previous: &Value, generation: i64, reason: &str) -> bool {
    previous["reason"] == reason && previous["observedGeneration"] == json!(generation)
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
    now: &str,
) -> Value {
    let cause = run.state.failure.as_ref().map(|(id, _)| id.as_str());
    let (phase, reason) = match run.state.phase {
        RunPhase::Running => ("Running", "Running"),
        RunPhase::Succeeded => ("Succeeded", "Succeeded"),
        RunPhase::Failed if cause == Some(crate::walk::RUN_TIMEOUT) => ("Failed", "Timeout"),
        RunPhase::Failed if cause == Some(RUN_STATE_TOO_LARGE) => ("Failed", "RunStateTooLarge"),
        RunPhase::Failed => ("Failed", "StepFailed"),
    };
    let mut by_node: BTreeMap<String, Vec<&crate::walk::Instance>> = BTreeMap::new();
    for (id, inst) in &run.state.instances {
        by_node
            .entry(split_instance_id(id).0)
            .or_default()
            .push(inst);
    }
    let work_nodes: Vec<_> = plan
        .nodes()
        .filter(|n| n.step.is_some() && !matches!(n.kind, NodeKind::CompoundEnd { .. }))
        .collect();
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
        .or_else(|| run.state.failure.as_ref().map(|(id, _)| id.clone()));
    let current_step = current.as_deref().map(|id| {
        let (node, key) = split_instance_id(id);
        step_at(&label(&node), &key)
    });
    let message = match (&run.state.failure, run.state.phase) {
        (Some((id, msg)), _) => {
            let (node, key) = split_instance_id(id);
            let path = plan.node(&node).map(|n| n.path.clone()).unwrap_or(node);
            said_at(&step_at(&path, &key), msg)
        }
        (None, RunPhase::Succeeded) => format!("{done}/{total} steps done"),
        (None, _) => format!(
            "{done}/{total} steps done; running {}",
            current_step.clone().unwrap_or_default()
        ),
    };
    let message = bounded(&message, MAX_STATUS_MESSAGE_CHARS);
    let mut steps = Vec::new();
    for n in &work_nodes {
        let insts = by_node.get(&n.id).cloned().unwrap_or_default();
        if insts.is_empty() {
            continue;
        }
        let count = |p: Phase| insts.iter().filter(|i| i.phase == p).count() as u32;
        let phase = if count(Phase::Running) > 0 {
            "Running"
        } else if count(Phase::Failed) > 0 {
            "Failed"
        } else if count(Phase::Aborted) > 0 {
            "Aborted"
        } else if count(Phase::Succeeded) > 0 {
            "Succeeded"
        } else if count(Phase::Skipped) as usize == insts.len() {
            "Skipped"
        } else {
            "Pending"
        };
        let mut entry = json!({"id": n.id, "path": n.path, "type": n.step_type, "phase": phase});
        if let Some(name) = &n.name {
            entry["name"] = json!(name);
        }
        if insts.len() == 1 {
            let i = insts[0];
            if !i.message.is_empty() {
                entry["message"] = json!(bounded(&i.message, MAX_STEP_MESSAGE_CHARS));
            }
            if i.phase.settled() && i.phase != Phase::Skipped {
                entry["changed"] = json!(i.changed);
            }
            if let Some(t) = i.started_at {
                entry["startedAt"] = json!(rfc3339(t));
            }
            if let Some(t) = i.finished_at.filter(|_| i.phase.settled()) {
                entry["finishedAt"] = json!(rfc3339(t));
            }
            if i.attempt > 1 {
                entry["attempt"] = json!(i.attempt);
            }
        } else {
            entry["changed"] = json!(insts.iter().any(|i| i.changed));
            entry["instances"] = json!({"total": insts.len(), "succeeded": count(Phase::Succeeded), "failed": count(Phase::Failed), "running": count(Phase::Running), "skipped": count(Phase::Skipped)});
        }
        steps.push(entry);
    }
    let omitted = steps.len().saturating_sub(MAX_STEP_ENTRIES);
    steps.truncate(MAX_STEP_ENTRIES);
    let conds = &previous["conditions"];
    let succeeded = run.state.phase == RunPhase::Succeeded;
    let failed = run.state.phase == RunPhase::Failed;
    let status = json!({
        "observedGeneration": generation,
        "lastRunTime": rfc3339(run.started_at),
        "phase": phase,
        "reason": reason,
        "message": message,
        "conditions": [
            condition(conds, "Ready", succeeded, reason, &message, generation, now),
            condition(conds, "Progressing", !succeeded && !failed, reason, &message, generation, now),
            condition(conds, "Degraded", failed, reason, &message, generation, now),
        ],
        "run": {"id": run.run_id, "generation": run.generation, "trigger": run.trigger, "startedAt": rfc3339(run.started_at), "finishedAt": run.finished_at.map(rfc3339)},
        "progress": format!("{done}/{total}"),
        "currentStep": current_step,
        "steps": steps,
        "stepsOmitted": if omitted > 0 { json!(omitted) } else { Value::Null },
        "queuedRun": queued.map(|(id, generation)| json!({"id": id, "generation": generation})),
    });
    // Absent fields stay in as nulls: status is written as a merge patch, where null deletes a
    // field an earlier status had (a queued run that started, a current step that finished).
    status
}

/// Where a step instance is, for people: its path, and the loop item of a loop's instance.
pub(super) fn step_at(path: &str, key: &[String]) -> String {
    if key.is_empty() {
        path.to_string()
    } else {
        format!("{path} [{}]", key.join("/"))
    }
}

/// `msg` said of the step at `at`: prefixed with it, unless the message already leads with it
/// (API errors do) or with a nested step's path (a failed group); naming it twice helps nobody.
pub(super) fn said_at(at: &str, msg: &str) -> String {
    let named = msg
        .strip_prefix(at)
        .is_some_and(|rest| rest.starts_with([':', '.', '[']));
    if named {
        msg.to_string()
    } else {
        format!("{at}: {msg}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_are_bounded_with_an_ellipsis() {
        let huge = "y".repeat(100_000);
        let st = not_run(&Value::Null, 3, "InternalError", &huge, "now");
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
        let st = of_run(&Value::Null, &c.plan, &run, 1, None, "now");
        assert_eq!(st["phase"], "Failed");
        assert_eq!(st["reason"], "RunStateTooLarge");
        let msg = st["message"].as_str().unwrap();
        assert!(msg.starts_with(RUN_STATE_TOO_LARGE), "{msg:.80}");
        assert_eq!(msg.chars().count(), MAX_STATUS_MESSAGE_CHARS);
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
        let item = step_at("spec.steps[2].steps[0]", &["worker-0".into()]);
        assert_eq!(item, "spec.steps[2].steps[0] [worker-0]");
        assert_eq!(
            said_at(&item, "failed"),
            "spec.steps[2].steps[0] [worker-0]: failed"
        );
    }
}
