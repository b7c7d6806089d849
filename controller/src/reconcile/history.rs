//! Bounded history: each flow keeps the objects (Jobs and so their pods, input Secrets, result
//! and journal ConfigMaps) of its newest finished runs only, as CronJob keeps its newest Jobs
//! (`successfulRunsHistoryLimit`/`failedRunsHistoryLimit`, docs/decisions.md "Bounded
//! history"). Without it every run's objects stayed until the flow was deleted: a flow
//! scheduled every 5 minutes left 288 pods a day.
//!
//! Which runs stay is decided from the run state alone (pure, [`runs_to_keep`]): the current
//! run and the runs beside it always (a retry starts from the current run), then the newest
//! finished runs of `status.previousRuns` up to each limit. The other runs the history names
//! are old; a run it does not name is old once the history has moved past it ([`Pruning`]). Nothing is deleted for its labels alone:
//! only an object this flow object owns, on the condition that it is still the object listed.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use pseudoflow_compiler::lower::INPUT_SECRET_TYPE;
use pseudoflow_compiler::names::label_value;
use pseudoflow_crd::{FlowOptions, FlowPhase};
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use super::observe::{controlled_by, delete_listed_job};
use super::Reconcile;
use crate::labels::{LABEL_FLOW, LABEL_RUN};
use pseudoflow_walk::{RunPhase, StoredRun};

/// `ttlSecondsAfterFinished` of every executor Job: a backstop only. The controller deletes
/// the objects of runs beyond a flow's history limits itself ([`prune`]) when a run ends; this
/// removes a finished Job (and its pods) that no controller came back for — the flow never ran
/// again, or the controller was uninstalled while flows stayed. Seven days: the longest a run
/// may last (`MAX_DURATION_SECONDS`), and longer than any controller outage after which a Job's
/// result must still be read (a Job gone before the controller read it fails its step), so
/// kept history is not cut short in ordinary use.
pub const JOB_TTL_SECONDS_AFTER_FINISHED: i32 = pseudoflow_crd::limits::MAX_DURATION_SECONDS as i32;

/// `job` with the [`JOB_TTL_SECONDS_AFTER_FINISHED`] backstop, as the controller creates it
/// (set here, not by lowering, so `pseudoflow-compile --emit` and the Job snapshots show the
/// step's Job without the controller's housekeeping).
pub fn with_backstop_ttl(job: &Job) -> Job {
    let mut job = job.clone();
    if let Some(spec) = job.spec.as_mut() {
        spec.ttl_seconds_after_finished = Some(JOB_TTL_SECONDS_AFTER_FINISHED);
    }
    job
}

/// How many finished runs of each outcome keep their objects, unless a flow says otherwise
/// (the controller's `--successful-runs-history-limit`/`--failed-runs-history-limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    /// Succeeded runs kept.
    pub succeeded: u32,
    /// Failed runs kept.
    pub failed: u32,
}

impl Default for HistoryLimits {
    /// CronJob's defaults: 3 succeeded, 1 failed.
    fn default() -> Self {
        HistoryLimits {
            succeeded: 3,
            failed: 1,
        }
    }
}

impl HistoryLimits {
    /// These limits with the flow's own (`spec.options`) put over them.
    pub fn for_flow(self, options: &FlowOptions) -> HistoryLimits {
        HistoryLimits {
            succeeded: options
                .successful_runs_history_limit
                .unwrap_or(self.succeeded),
            failed: options.failed_runs_history_limit.unwrap_or(self.failed),
        }
    }
}

/// The runs whose objects stay: `run` and those beside it, whatever their phase, then the
/// newest finished runs up to each limit (`run` itself counts when it ended). Aborted runs
/// (replaced, or stopped by a deletion) count under neither: their Jobs were deleted when they
/// were stopped, and what is left of them goes.
pub fn runs_to_keep(run: &StoredRun, limits: HistoryLimits) -> BTreeSet<String> {
    let mut keep: BTreeSet<String> = std::iter::once(run)
        .chain(&run.beside)
        .map(|r| r.run_id.clone())
        .collect();
    let (mut succeeded, mut failed) = (0, 0);
    let current = match run.state.phase {
        RunPhase::Running => None,
        _ => Some((run.run_id.as_str(), run.outcome().0)),
    };
    let ended = run.previous.iter().map(|e| (e.run_id.as_str(), e.phase));
    for (id, phase) in current.into_iter().chain(ended) {
        let (count, limit) = match phase {
            FlowPhase::Succeeded => (&mut succeeded, limits.succeeded),
            FlowPhase::Failed => (&mut failed, limits.failed),
            _ => continue,
        };
        if *count < limit {
            keep.insert(id.to_string());
        }
        *count += 1;
    }
    keep
}

/// Which runs' objects go, decided once per prune.
#[derive(Debug)]
pub struct Pruning {
    /// Runs whose objects stay ([`runs_to_keep`]).
    keep: BTreeSet<String>,
    /// Runs the history names, not kept: they go.
    named: BTreeSet<String>,
    /// A run the run state does not name (an Allow run that ended beside the current one and
    /// was dropped from it, or one older than the history) goes only if the history is full
    /// and its object was made no later than the oldest run the history names started: a run
    /// that ended beside the current one is newer, and stays until the history moves past it.
    cutoff: Option<i64>,
}

impl Pruning {
    /// What to prune after `run` ended, with `limits`.
    pub fn after(run: &StoredRun, limits: HistoryLimits) -> Pruning {
        let keep = runs_to_keep(run, limits);
        let named = std::iter::once(run.run_id.as_str())
            .chain(run.previous.iter().map(|e| e.run_id.as_str()))
            .filter(|id| !keep.contains(*id))
            .map(str::to_string)
            .collect();
        let full = run.previous.len() >= pseudoflow_crd::status::MAX_PREVIOUS_RUNS;
        let cutoff = run.previous.last().filter(|_| full).map(|e| e.started_at);
        Pruning {
            keep,
            named,
            cutoff,
        }
    }

    /// Whether an object of run `run_id`, made at `created` (unix seconds), goes.
    pub fn is_old(&self, run_id: &str, created: Option<i64>) -> bool {
        if self.keep.contains(run_id) {
            return false;
        }
        self.named.contains(run_id)
            || self
                .cutoff
                .zip(created)
                .is_some_and(|(cutoff, made)| made <= cutoff)
    }
}

/// Deletes the objects of the flow's runs not in [`runs_to_keep`]. Called when a run ends;
/// a failure is logged, not fatal (the next run's end tries again, and the Jobs'
/// `ttlSecondsAfterFinished` is the backstop).
pub(crate) async fn prune(r: &Reconcile<'_>, run: &StoredRun, options: &FlowOptions) {
    let pruning = Pruning::after(run, r.own.history.for_flow(options));
    if let Err(e) = prune_runs(r, &pruning).await {
        warn!(flow = %r.key(), error = %e, "cannot delete the objects of old runs");
    }
}

async fn prune_runs(r: &Reconcile<'_>, pruning: &Pruning) -> kube::Result<()> {
    let (client, ns) = (&r.ctx.client, r.ns());
    let selector = format!("{LABEL_FLOW}={}", label_value(r.flow_id.name));
    let old = |meta: &ObjectMeta| {
        meta.labels
            .as_ref()
            .and_then(|l| l.get(LABEL_RUN))
            .is_some_and(|run| {
                let created = meta.creation_timestamp.as_ref().map(|t| t.0.as_second());
                pruning.is_old(run, created)
            })
    };
    // Jobs first (with their pods, propagation Background), then what they read and wrote.
    for job in list::<Job>(r, &selector).await? {
        if old(&job.metadata) && controlled_by(&job.metadata.owner_references, r.uid) {
            debug!(flow = %r.key(), job = ?job.metadata.name, "deleting an old run's Job");
            delete_listed_job(client, ns, &job).await?;
        }
    }
    // Input Secrets only (by type): the run state is a Secret of the flow too, never an old
    // run's (it carries no run label either).
    for secret in list::<Secret>(r, &selector).await? {
        let input = secret.type_.as_deref() == Some(INPUT_SECRET_TYPE);
        if input && old(&secret.metadata) && controlled_by(&secret.metadata.owner_references, r.uid)
        {
            delete_exact(
                &Api::<Secret>::namespaced(client.clone(), ns),
                &secret.metadata,
            )
            .await?;
        }
    }
    // Result and journal ConfigMaps: the executor owns them to the flow without `controller`.
    for cm in list::<ConfigMap>(r, &selector).await? {
        if old(&cm.metadata) && owned_by(&cm.metadata.owner_references, r.uid) {
            delete_exact(
                &Api::<ConfigMap>::namespaced(client.clone(), ns),
                &cm.metadata,
            )
            .await?;
        }
    }
    Ok(())
}

/// The flow's objects of kind `K` carrying its flow label.
async fn list<K>(r: &Reconcile<'_>, selector: &str) -> kube::Result<Vec<K>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(r.ctx.client.clone(), r.ns());
    Ok(api
        .list(&ListParams::default().labels(selector))
        .await?
        .items)
}

/// Whether any owner reference names `uid` (controller or not).
fn owned_by(refs: &Option<Vec<OwnerReference>>, uid: &str) -> bool {
    !uid.is_empty() && refs.iter().flatten().any(|o| o.uid == uid)
}

/// Deletes the object `meta` describes if it is still that object (its uid); gone already is
/// fine.
async fn delete_exact<K>(api: &Api<K>, meta: &ObjectMeta) -> kube::Result<()>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: meta.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api
        .delete(meta.name.as_deref().unwrap_or_default(), &dp)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pseudoflow_walk::EndedRun;

    fn ended(id: &str, phase: FlowPhase) -> EndedRun {
        EndedRun {
            run_id: id.into(),
            phase,
            reason: String::new(),
            started_at: 0,
            finished_at: None,
        }
    }

    fn run(id: &str, phase: RunPhase, previous: Vec<EndedRun>) -> StoredRun {
        let mut run = StoredRun {
            run_id: id.into(),
            previous,
            ..Default::default()
        };
        run.state.phase = phase;
        run
    }

    fn ids(keep: BTreeSet<String>) -> Vec<String> {
        keep.into_iter().collect()
    }

    #[test]
    fn the_newest_runs_of_each_outcome_stay_up_to_their_limits() {
        use FlowPhase::*;
        let previous = vec![
            ended("r7", Succeeded),
            ended("r6", Failed),
            ended("r5", Succeeded),
            ended("r4", Aborted),
            ended("r3", Failed),
        ];
        let current = run("r8", RunPhase::Succeeded, previous);
        // r8 counts as the first succeeded run; r4 (aborted) and r3 (an older failure) go.
        assert_eq!(
            ids(runs_to_keep(&current, HistoryLimits::default())),
            ["r5", "r6", "r7", "r8"]
        );
        let none = HistoryLimits {
            succeeded: 0,
            failed: 0,
        };
        assert_eq!(ids(runs_to_keep(&current, none)), ["r8"]);
    }

    #[test]
    fn the_current_run_stays_even_beyond_its_limit_as_a_retry_starts_from_it() {
        let previous = vec![ended("r1", FlowPhase::Failed)];
        let current = run("r2", RunPhase::Failed, previous);
        let none = HistoryLimits {
            succeeded: 0,
            failed: 0,
        };
        assert_eq!(ids(runs_to_keep(&current, none)), ["r2"]);
        assert_eq!(
            ids(runs_to_keep(&current, HistoryLimits::default())),
            ["r2"]
        );
    }

    #[test]
    fn a_running_run_and_those_beside_it_stay_and_do_not_count() {
        let previous = vec![
            ended("r1", FlowPhase::Succeeded),
            ended("r0", FlowPhase::Succeeded),
        ];
        let mut current = run("r3", RunPhase::Running, previous);
        current.beside = vec![run("r2", RunPhase::Running, vec![])];
        let one = HistoryLimits {
            succeeded: 1,
            failed: 1,
        };
        assert_eq!(ids(runs_to_keep(&current, one)), ["r1", "r2", "r3"]);
    }

    #[test]
    fn a_run_the_history_does_not_name_goes_only_once_the_full_history_moved_past_it() {
        let previous: Vec<EndedRun> = (0..5)
            .map(|i| EndedRun {
                started_at: 100 + i,
                ..ended(&format!("r{i}"), FlowPhase::Succeeded)
            })
            .rev()
            .collect();
        let current = run("r9", RunPhase::Succeeded, previous.clone());
        let p = Pruning::after(&current, HistoryLimits::default());
        // r4, r3 kept with r9; r2..r0 named and beyond the limit.
        assert!(!p.is_old("r9", Some(1)) && !p.is_old("r4", Some(1)));
        assert!(p.is_old("r0", Some(999)));
        // Unnamed: older than the oldest named run (r0 started at 100), or not.
        assert!(p.is_old("gone", Some(100)));
        assert!(!p.is_old("ended-beside", Some(101)));
        // With a history not yet full, every run ever started is named or beside: unnamed stay.
        let young = run("r9", RunPhase::Succeeded, previous[..2].to_vec());
        assert!(!Pruning::after(&young, HistoryLimits::default()).is_old("x", Some(0)));
    }

    #[test]
    fn a_flow_s_options_override_the_controller_s_limits() {
        let options = FlowOptions {
            failed_runs_history_limit: Some(4),
            ..Default::default()
        };
        let limits = HistoryLimits::default().for_flow(&options);
        assert_eq!(
            limits,
            HistoryLimits {
                succeeded: 3,
                failed: 4
            }
        );
    }
}
