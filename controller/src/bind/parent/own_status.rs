//! The bound flow's own status: its objects summed up, or why its binding is refused.

use kube::api::{Api, DynamicObject};
use pseudoflow_crd::status::BoundSummary;
use pseudoflow_crd::{FlowPhase, PseudoFlowStatus};
use serde_json::Value;

use crate::bind::{summary, Binder};
use crate::flow::events::EventType;
use crate::flow::{outcome, status, Error, Reconciling};

/// The bound flow fails with `message` (told once per message: an Event and the status).
pub(super) async fn refused(
    r: &Reconciling<'_, Binder>,
    flows: &Api<DynamicObject>,
    previous: &Value,
    message: &str,
) -> Result<(), Error> {
    let generation = r.flow.metadata.generation.unwrap_or(0);
    if previous["message"].as_str() == Some(message)
        && status::already_failed(previous, generation, "BindRefused")
    {
        return Ok(());
    }
    r.publish(EventType::Warning, "BindRefused", message).await;
    r.told().await;
    let next = status::not_run(previous, generation, "BindRefused", message, r.now);
    outcome::patch_status(flows, r.flow_id.name, status::replacing(previous, &next)).await
}

/// Writes the bound flow's status: its objects counted by phase, the latest failures.
pub(super) async fn summarise(
    r: &Reconciling<'_, Binder>,
    flows: &Api<DynamicObject>,
    previous: &Value,
    kind: &str,
    s: BoundSummary,
) -> Result<(), Error> {
    // Whoever sees the summary sees the Events (a child refused) that led to it.
    r.told().await;
    let message = summary::message(kind, &s);
    let generation = r.flow.metadata.generation.unwrap_or(0);
    let conds = &previous["conditions"];
    let (busy, failed) = (s.creating > 0, s.failed > 0);
    let next = PseudoFlowStatus {
        observed_generation: Some(generation),
        phase: Some(if busy {
            FlowPhase::Running
        } else {
            FlowPhase::Succeeded
        }),
        reason: Some("Bound".into()),
        message: Some(message.clone()),
        conditions: vec![
            status::condition(
                conds,
                "Ready",
                !busy && !failed,
                "Bound",
                &message,
                generation,
                r.now,
            ),
            status::condition(
                conds,
                "Progressing",
                busy,
                "Bound",
                &message,
                generation,
                r.now,
            ),
            status::condition(
                conds, "Degraded", failed, "Bound", &message, generation, r.now,
            ),
        ],
        bound: Some(s),
        ..Default::default()
    };
    let patch = status::replacing(previous, &next);
    if status::without_nulls(&patch) != *previous {
        outcome::patch_status(flows, r.flow_id.name, patch).await?;
    }
    Ok(())
}
