//! Reading and writing a flow's stored run (its run-state Secret, sealed and numbered: see
//! [`super::seal`]), and the Failed status that says what to do when it cannot be trusted.

use pseudoflow_crd::RUN_ANNOTATION;
use pseudoflow_walk::StoredRun;

use super::{seal, store, Reconcile};
use crate::flow::events::EventType;
use crate::flow::{outcome, status, Error};
use crate::limits::{bounded, MAX_STATUS_MESSAGE_CHARS};

impl Reconcile<'_> {
    /// The stored run (if any is trusted) and the resourceVersion of its Secret; None when the
    /// reconcile ends here (the run state cannot be read or was not written by the controller,
    /// reported).
    pub(super) async fn load(&self) -> Result<Option<(Option<StoredRun>, Option<String>)>, Error> {
        let (r, runs) = (self, self.own);
        let key = runs.run_state_key.get(&r.ctx.client).await?;
        // What status says was stored last survives a restart; what this process stored or saw
        // may be newer.
        let recorded = self.previous["runStateSequence"].as_u64().unwrap_or(0);
        let floor = runs.sequences.raise(r.uid, recorded);
        let owner = seal::Owner {
            namespace: r.ns(),
            name: r.flow_id.name,
            uid: r.uid,
        };
        Ok(match store::load(&r.ctx.client, key, owner, floor).await? {
            store::Loaded::Nothing => Some((None, None)),
            store::Loaded::Run(run, rv, seq) => {
                runs.sequences.raise(r.uid, seq);
                Some((Some(*run), rv))
            }
            // Nothing in it is trusted: the next save replaces it.
            store::Loaded::NotOurs(rv) => Some((None, Some(rv))),
            store::Loaded::Unreadable(_, why) => {
                unreadable_run_state(r, &why).await?;
                None
            }
            store::Loaded::Tampered(t) => {
                tampered_run_state(r, &t).await?;
                None
            }
        })
    }

    /// Saves `run` as the flow's run state, owned by the flow object, sealed as the next state
    /// number after every one stored or seen.
    pub(super) async fn save(&self, run: &StoredRun, rv: Option<&str>) -> Result<String, Error> {
        let (client, runs) = (&self.ctx.client, self.own);
        let key = runs.run_state_key.get(client).await?;
        let seq = runs.sequences.get(self.uid) + 1;
        let saved = store::save(client, key, self.flow, run, rv, seq).await?;
        // Raised only once stored: a save that failed leaves the floor where the Secret is.
        runs.sequences.raise(self.uid, seq);
        Ok(saved)
    }
}

/// Fails the flow `RunStateUnreadable`: starting afresh instead would re-run every step on every
/// reconcile, so the user decides (by deleting the Secret).
async fn unreadable_run_state(r: &Reconcile<'_>, why: &str) -> Result<(), Error> {
    let (flows, previous) = (&r.flows, &r.previous);
    let message = format!(
        "the stored state of this flow's run (Secret {}) cannot be read: {why}; delete that \
         Secret to start a new run",
        store::name(r.flow_id.name)
    );
    if previous["reason"] != "RunStateUnreadable" {
        r.publish(EventType::Warning, "RunStateUnreadable", &message)
            .await;
    }
    let unreadable = status::failed_with("RunStateUnreadable", &message);
    r.told().await;
    outcome::patch_status(flows, r.flow_id.name, status::to_patch(&unreadable)).await?;
    Ok(())
}

/// Fails the flow `RunStateMissing`: the state of run `id`, which status says ran, was deleted
/// (the `edit` role may delete Secrets). Starting it again would repeat every step it ran, so
/// the user decides: a new run annotation value (`kubectl pf run`) or a spec change starts a
/// new run.
pub(super) async fn missing_run_state(r: &Reconcile<'_>, id: &str) -> Result<(), Error> {
    let (flows, previous) = (&r.flows, &r.previous);
    let message = format!(
        "the stored state of run {id} (Secret {}) was deleted: the run is not started again, \
         which would repeat its steps; `kubectl pf run {}` (a new {RUN_ANNOTATION} annotation \
         value) or a change of the flow starts a new run",
        store::name(r.flow_id.name),
        r.flow_id.name,
    );
    if previous["reason"] != "RunStateMissing" {
        r.publish(EventType::Warning, "RunStateMissing", &message)
            .await;
    }
    let missing = status::failed_with("RunStateMissing", &message);
    r.told().await;
    outcome::patch_status(flows, r.flow_id.name, status::to_patch(&missing)).await?;
    Ok(())
}

/// Fails the flow `RunStateTampered`: its run state is not what the controller stored (changed,
/// unsealed, or an older state put back), so nothing more of that run is driven. The Warning
/// Event names who last wrote the Secret, as its managedFields say.
async fn tampered_run_state(r: &Reconcile<'_>, tampered: &store::Tampered) -> Result<(), Error> {
    let (flows, previous) = (&r.flows, &r.previous);
    let message = format!(
        "the stored state of this flow's run (Secret {}) is not what the controller wrote: {}; \
         last written by {}. Nothing more of this run is driven; delete that Secret to start a \
         new run",
        store::name(r.flow_id.name),
        tampered.why,
        tampered.writer,
    );
    let message = bounded(&message, MAX_STATUS_MESSAGE_CHARS);
    if previous["reason"] != "RunStateTampered" {
        r.publish(EventType::Warning, "RunStateTampered", &message)
            .await;
        r.ctx.metrics.run_finished(&r.key(), "Failed");
    }
    let tampered = status::failed_with("RunStateTampered", &message);
    r.told().await;
    outcome::patch_status(flows, r.flow_id.name, status::to_patch(&tampered)).await?;
    Ok(())
}
