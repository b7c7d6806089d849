//! An Event for every step, whatever its type (docs/operations.md: `kubectl events` tells the whole run): a step's Job launch and its
//! result are told where they happen (with the Job's name), and everything else a reconcile
//! did to a step — a structural step starting and ending, a sleep's timer ending, eval and
//! templates to variables, `onlyIfChanged` skips, a refusal before any Job exists, an abort —
//! is told here, from the difference between the run's step phases before and after the
//! reconcile. Events say what `status.steps` says, in the same words.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use crate::flow::events::EventType;
use pseudoflow_compiler::plan::{NodeKind, Plan};

use super::Reconcile;
use crate::flow::status::{said_at, step_at};
use pseudoflow_walk::{instance_id, split_instance_id, Phase, StoredRun};

/// The step phases a reconcile started from, and the steps already told of since.
pub(super) struct Narrator {
    before: HashMap<String, Phase>,
    told: Mutex<BTreeSet<String>>,
}

impl Narrator {
    /// Remembers where every step of `run` stands now.
    pub fn before(run: &StoredRun) -> Self {
        Narrator {
            before: run
                .state
                .instances
                .iter()
                .map(|(id, i)| (id.clone(), i.phase))
                .collect(),
            told: Mutex::default(),
        }
    }

    /// Step instance `node`/`key` had its Event published where it happened.
    pub fn told(&self, node: &str, key: &[String]) {
        self.told
            .lock()
            .expect("not poisoned")
            .insert(instance_id(node, key));
    }

    /// What to publish for the steps of `run` whose phase changed and that were not told of.
    pub fn untold(&self, plan: &Plan, run: &StoredRun) -> Vec<(EventType, &'static str, String)> {
        let told = self.told.lock().expect("not poisoned");
        let mut said = Vec::new();
        for (id, inst) in &run.state.instances {
            let was = self.before.get(id).copied().unwrap_or_default();
            if was == inst.phase || told.contains(id) {
                continue;
            }
            let (node_id, key) = split_instance_id(id);
            let Some(node) = plan.node(&node_id) else {
                continue;
            };
            let at = step_at(&node.path, &key);
            let about = |what: &str| {
                if inst.message.is_empty() {
                    format!("{at}: {what}")
                } else {
                    said_at(&at, &inst.message)
                }
            };
            let event = match (&node.kind, inst.phase) {
                (_, Phase::Pending) => continue,
                // A structural step's end: its closing node.
                (NodeKind::CompoundEnd { .. }, Phase::Succeeded) => (
                    EventType::Normal,
                    "StepSucceeded",
                    format!("{at}: {} ended", opened(&node.step_type)),
                ),
                (NodeKind::CompoundEnd { .. }, Phase::Failed) => {
                    (EventType::Warning, "StepFailed", about("failed"))
                }
                // Skipped or aborted as a whole: told at its start node.
                (NodeKind::CompoundEnd { .. }, _) => continue,
                // Only the steps status lists: not the flow's own start and end.
                _ if node.step.is_none() => continue,
                // A structural step's start: its opening node has done its part (items found,
                // branches forked) and its body begins.
                (kind, Phase::Succeeded) if opens(kind) => {
                    let what = match inst.message.as_str() {
                        "" => node.step_type.clone(),
                        m => format!("{}: {m}", node.step_type),
                    };
                    (
                        EventType::Normal,
                        "StepStarted",
                        format!("{at}: started ({what})"),
                    )
                }
                (_, Phase::Running) if pseudoflow_walk::awaits_decision(node) => (
                    EventType::Normal,
                    "WaitingForApproval",
                    waiting_note(node, &at),
                ),
                (_, Phase::Running) => (
                    EventType::Normal,
                    "StepStarted",
                    format!("{at}: started ({})", node.step_type),
                ),
                (_, Phase::Succeeded) => (EventType::Normal, "StepSucceeded", about("succeeded")),
                (_, Phase::Failed) => (EventType::Warning, "StepFailed", about("failed")),
                (_, Phase::Skipped) => (EventType::Normal, "StepSkipped", about("skipped")),
                (_, Phase::Aborted) => (EventType::Warning, "StepAborted", about("aborted")),
            };
            said.push(event);
        }
        said
    }

    /// Publishes [`Narrator::untold`].
    pub async fn tell(&self, r: &Reconcile<'_>, plan: &Plan, run: &StoredRun) {
        for (ty, reason, note) in self.untold(plan, run) {
            r.publish(ty, reason, &note).await;
        }
    }
}

/// The Event of an `approval` step beginning to wait: what to check, and how to decide.
fn waiting_note(node: &pseudoflow_compiler::plan::PlanNode, at: &str) -> String {
    let name = pseudoflow_walk::step_label(node);
    let check = match node.step_kind() {
        Some(pseudoflow_crd::StepKind::Approval(a)) => a.message.clone(),
        _ => None,
    };
    let check = check.map(|m| format!(" ({m})")).unwrap_or_default();
    format!(
        "{at}: waiting for approval: {name}{check}; approve with the annotation \
         ops.example.com/approve={name} (or reject with ops.example.com/reject={name})"
    )
}

/// Whether a node of this kind opens a structural step that a `CompoundEnd` closes.
fn opens(kind: &NodeKind) -> bool {
    matches!(
        kind,
        NodeKind::LoopStart { .. }
            | NodeKind::Fork { .. }
            | NodeKind::RetryStart { .. }
            | NodeKind::Include { .. }
            | NodeKind::IncludeFlow { .. }
    )
}

/// The step type a closing node's type (`loop-end`) closes.
fn opened(end_type: &str) -> &str {
    end_type.strip_suffix("-end").unwrap_or(end_type)
}
