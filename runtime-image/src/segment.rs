//! A fused segment (docs/decisions.md#step-fusion): several consecutive steps the controller
//! gave one Job. They run in order, each exactly as it would in a Job of its own — its own
//! timeout, its own result — and a failure stops the segment unless the step has
//! `continueOnError`. Each step's result is recorded (the [`crate::journal`]) as soon as it
//! ends, so the controller shows progress while the Job runs and a replacement pod resumes
//! after the last recorded step instead of running it again.

use std::time::{SystemTime, UNIX_EPOCH};

use pseudoflow_crd::protocol::{ExecutorInput, MemberResult, SegmentStep, StepResult};
use pseudoflow_crd::Step;

use crate::context::ExecCtx;
use crate::error::StepError;
use crate::journal::Journal;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// The input one member runs with: the segment's input with the member's node, path, step
/// and timeout.
fn member_input(input: &ExecutorInput, m: &SegmentStep) -> ExecutorInput {
    ExecutorInput {
        node_id: m.node_id.clone(),
        path: m.path.clone(),
        step: m.step.clone(),
        timeout_seconds: m.timeout_seconds,
        segment: Vec::new(),
        changed_before: false,
        ..input.clone()
    }
}

/// Runs one member (or reports why it cannot run).
async fn run_member(ctx: &ExecCtx, m: &SegmentStep, changed_on_node: bool) -> StepResult {
    if let Some(why) = &m.error {
        return StepResult::failed(why.clone());
    }
    if let Some(done) = &m.outcome {
        // Controller-local work (log, eval, template to a variable) the controller did when
        // it prepared the segment: reported in its turn.
        return done.clone();
    }
    let step: Step = match serde_json::from_value(m.step.clone()) {
        Ok(s) => s,
        Err(e) => return StepResult::failed(format!("{}: step: {e}", m.path)),
    };
    if step.kind.params().only_if_changed() && !changed_on_node {
        return StepResult::succeeded(false, "skipped: nothing changed on this node");
    }
    if let Some(seconds) = step.kind.params().waits_seconds() {
        return pause(seconds, m.timeout_seconds).await;
    }
    let member = ctx.derive(member_input(&ctx.input, m));
    match crate::execute(&member, &step).await {
        Ok(r) => r,
        Err(StepError::Failed(msg) | StepError::Input(msg)) => StepResult::failed(msg),
    }
}

/// A `sleep` between the segment's Job steps waits here, in the pod; a timeout shorter than
/// the sleep ends it early, as a failure (as the controller's timer does for an unfused one).
async fn pause(seconds: u32, timeout: Option<u32>) -> StepResult {
    let cut = timeout.filter(|t| *t < seconds);
    let wait = cut.unwrap_or(seconds);
    tokio::time::sleep(std::time::Duration::from_secs(wait.into())).await;
    match cut {
        Some(t) => StepResult::failed(format!("timed out after {t}s")),
        None => StepResult::succeeded(false, String::new()),
    }
}

/// Runs the segment in `ctx.input.segment`, resuming after what `journal` already holds.
/// The summary is ok when every step that ran succeeded or may fail (`continueOnError`).
pub async fn run(ctx: &ExecCtx, journal: &mut Journal) -> StepResult {
    let input = &ctx.input;
    // Outside a node loop there is no node whose changes count (as for an unfused step).
    let per_node = !input.instance.is_empty();
    let mut changed_on_node = input.changed_before;
    let mut members: Vec<MemberResult> = Vec::new();
    let mut ok = true;
    for m in &input.segment {
        let recorded = journal.recorded(&m.node_id).cloned();
        let member = match recorded {
            Some(r) => {
                tracing::info!(node = %m.node_id, "already ran (recorded): not run again");
                r
            }
            None => {
                let started_ms = now_ms();
                tracing::info!(node = %m.node_id, path = %m.path, "segment step starting");
                let result = run_member(ctx, m, per_node && changed_on_node).await;
                let member = MemberResult {
                    node_id: m.node_id.clone(),
                    result,
                    started_ms,
                    finished_ms: now_ms(),
                };
                journal.record(ctx, &member).await;
                member
            }
        };
        tracing::info!(
            node = %m.node_id, ok = member.result.ok, changed = member.result.changed,
            summary = %crate::output::loggable(&member.result), "segment step finished"
        );
        changed_on_node |= member.result.changed;
        let failed = !member.result.ok;
        members.push(member);
        if failed && !m.continue_on_error {
            ok = false;
            break;
        }
    }
    let ran = members.len();
    let total = input.segment.len();
    let message = match members.last() {
        Some(last) if !ok => format!(
            "step {ran} of {total} ({}) failed: {}",
            last.node_id, last.result.message
        ),
        _ => format!("ran {ran} of {total} steps"),
    };
    StepResult {
        ok,
        changed: members.iter().any(|m| m.result.changed),
        message,
        segment: members,
        ..Default::default()
    }
}
