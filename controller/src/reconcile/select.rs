//! Selecting the run a reconcile drives: a new one when the schedule, a retry or a spec change
//! wants one, the stored one otherwise, under the flow's concurrencyPolicy; the runs it
//! replaces are stopped, and its secret stored before its first Job.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use pseudoflow_compiler::lower::launches_jobs;
use pseudoflow_compiler::Compiled;
use pseudoflow_crd::RUN_ANNOTATION;
use pseudoflow_walk::select::{select, wanted_id};
use pseudoflow_walk::StoredRun;

use super::start::{give_secrets, new_run, requeue_at};
use super::{load, observe, plan_of, retry, schedule, Reconcile};
use crate::flow::events::EventType;
use crate::flow::{outcome, status, Error};

/// What selecting the run decided.
pub(super) enum Selected {
    /// Drive `run` (the resourceVersion of the stored run state is `rv`); `queued` waits.
    Drive {
        run: Box<StoredRun>,
        queued: Option<String>,
        rv: Option<String>,
    },
    /// Nothing to drive now: the reconcile ends with this.
    Done(Action),
}

impl Reconcile<'_> {
    /// The run to drive (a new one if the schedule or a spec change wants one), with the runs
    /// it replaces stopped and its secret stored before its first Job.
    pub(super) async fn select(
        &self,
        compiled: &Compiled,
        stored: Option<StoredRun>,
        rv: Option<String>,
        sched: &schedule::ScheduleDecision,
    ) -> Result<Selected, Error> {
        let (r, generation, deleting) = (self, self.generation, self.deleting);
        if let Some(note) = sched.missed_note(compiled.spec.starting_deadline_seconds) {
            r.publish(EventType::Warning, "ScheduleMissed", &note).await;
        }
        if let (None, None, Some(trigger)) = (&stored, &rv, &sched.start) {
            let id = wanted_id(r.uid, generation, trigger.as_deref(), deleting);
            if self.state_deleted_of(&id) {
                load::missing_run_state(r, &id).await?;
                return Ok(Selected::Done(Action::await_change()));
            }
        }
        // A new ops.example.com/retry value replaces the ended run with its retry.
        let stored = retry::apply(r, stored, deleting).await?;
        let wanted = match (sched.start.clone(), &stored) {
            (Some(trigger), _) => {
                let id = wanted_id(r.uid, generation, trigger.as_deref(), deleting);
                let mut run = new_run(&id, generation, trigger, &self.raw_spec, r.now);
                // A retry value already there when a run starts is not a request to retry it.
                run.retry_token = retry::token(r);
                // So a scheduled flow starts a run now only for a new run annotation value.
                run.run_token = r.flow.annotations().get(RUN_ANNOTATION).cloned();
                run
            }
            (None, Some(stored)) => stored.clone(),
            (None, None) => {
                let idle = schedule::idle(&compiled.spec, sched, generation);
                outcome::patch_status(&r.flows, r.flow_id.name, status::to_patch(&idle)).await?;
                return Ok(Selected::Done(requeue_at(sched.next, r.now)));
            }
        };
        if let Some(note) = sched.skipped_note() {
            r.publish(EventType::Normal, "ScheduleSkipped", &note).await;
        }
        let policy = compiled.spec.options.concurrency_policy;
        let selection = select(stored, wanted.clone(), policy, deleting);
        for old in &selection.aborted {
            r.abort_run(old).await?;
        }
        let (mut run, queued) = (selection.run, selection.queued);
        // A run is driven with the spec it started with (kept in the run state), so a
        // Forbid-queued spec change waits for the running run to finish as it was. Runs stored
        // before the spec was kept: driven only while the spec is unchanged; otherwise their
        // Jobs finish, then anew.
        if run.spec.is_none() && run.generation != generation {
            return Ok(Selected::Done(
                self.replace_unkept(&run, &wanted, rv, sched).await?,
            ));
        }
        // Every run gets its secret (the root of its journals' signing keys) stored before its
        // first Job exists, so a restarted controller derives the same keys. A new run that
        // launches no Job (every step in the controller) stores it with the rest of its state
        // at the end of this reconcile: one write fewer per run of a bound flow's object.
        let mut rv = rv;
        let no_jobs = run.beside.is_empty()
            && run.spec.as_ref().is_none_or(|s| *s == self.raw_spec)
            && !launches_jobs(plan_of(compiled, deleting));
        if give_secrets(&mut run) && !no_jobs {
            rv = Some(self.save(&run, rv.as_deref()).await?);
        }
        Ok(Selected::Drive {
            run: Box::new(run),
            queued,
            rv,
        })
    }

    /// Whether run `id` is the one status says ran, and its stored state (some was stored: the
    /// sequence is above 0) is gone: someone deleted the run-state Secret. That run is not run
    /// again from scratch (its steps would repeat); only a new run (a new run annotation
    /// value, a spec change) starts afresh. Deleting a state the controller refused
    /// (`RunStateTampered`, `RunStateUnreadable`) is the documented way out, so it is no
    /// reason to stop.
    fn state_deleted_of(&self, id: &str) -> bool {
        let previous = &self.previous;
        let refused = ["RunStateTampered", "RunStateUnreadable"];
        let was_refused = refused.iter().any(|r| previous["reason"] == *r);
        self.own.sequences.get(self.uid) > 0 && previous["run"]["id"] == id && !was_refused
    }

    /// A run of an older spec that was not kept with it, queued behind: wait for its Jobs, then
    /// start `wanted`.
    async fn replace_unkept(
        &self,
        run: &StoredRun,
        wanted: &StoredRun,
        rv: Option<String>,
        sched: &schedule::ScheduleDecision,
    ) -> Result<Action, Error> {
        let r = self;
        if r.jobs_running(&run.run_id).await? {
            let queued = status::queued(&wanted.run_id, self.generation);
            outcome::patch_status(&r.flows, r.flow_id.name, status::to_patch(&queued)).await?;
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        if wanted.run_id == run.run_id {
            // No new run is wanted (suspended, or between slots): nothing more to drive.
            return Ok(requeue_at(sched.next, r.now));
        }
        self.save(wanted, rv.as_deref()).await?;
        Ok(Action::requeue(Duration::from_millis(10)))
    }

    /// Deletes every Job of an older run (concurrencyPolicy Replace, deletion).
    async fn abort_run(&self, old: &str) -> Result<(), Error> {
        let selector = crate::labels::run_selector(old);
        observe::delete_owned_jobs(&self.ctx.client, self.ns(), self.uid, &selector).await?;
        self.ctx.metrics.run_finished(&self.key(), "Aborted");
        let note = format!("run {old} aborted: a new run replaces it");
        self.publish(EventType::Normal, "RunReplaced", &note).await;
        Ok(())
    }

    /// Whether a Job of `run_id` is still running (a run of an older spec, waited for).
    async fn jobs_running(&self, run_id: &str) -> Result<bool, Error> {
        let selector = crate::labels::run_selector(run_id);
        Ok(Api::<Job>::namespaced(self.ctx.client.clone(), self.ns())
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .iter()
            .any(|j| {
                j.status
                    .as_ref()
                    .is_none_or(|s| s.completion_time.is_none() && s.failed.unwrap_or(0) == 0)
            }))
    }
}
