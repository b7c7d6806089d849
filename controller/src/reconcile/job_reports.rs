//! What a step's Job has reported, read once per reconcile: for a Job of one step its result
//! when it ends; for a fused segment's Job (docs/decisions.md#step-fusion) also its journal
//! while it runs, so each step is folded into the run as soon as it ends, not when the whole
//! segment does.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use pseudoflow_compiler::plan::{Plan, PlanNode};
use pseudoflow_crd::protocol::journal::{journal_name, verified, JOURNAL_KEY};
use pseudoflow_crd::protocol::sealed::result_key;
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::protocol::{journal_key, MemberResult};

use super::node_health::{self, NodeHealth};
use super::observe;
use pseudoflow_walk::StoredRun;

/// What one Job has reported.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// Still running; for a segment, the steps its journal records as ended.
    Running(Vec<MemberResult>),
    /// Ended with this result (for a segment, `segment` lists its steps' results).
    Ended(Box<StepResult>),
    /// The Job is gone for good (deleted by hand, by a TTL): it can never report.
    Gone,
}

/// One step's result from its Job's report, with when it ran (unix milliseconds) when the
/// executor timed it.
pub type Outcome = (StepResult, Option<(i64, i64)>);

/// The reports of the Jobs looked at in one reconcile, by Job name.
#[derive(Default)]
pub struct Reports {
    seen: Mutex<HashMap<String, Report>>,
}

impl Reports {
    /// The report of Job `name` (looked up once per reconcile). `jobs` is the run's Jobs as
    /// listed; `secrets` are the run's secret when the Job keeps a journal (a fused segment)
    /// and when it seals its result (every Job of a run that has a secret).
    /// `jobs` holds only Jobs this flow owns ([`observe::run_jobs`]). A running Job pinned to a node that can no longer report (`nodes`) has ended, failed:
    /// see [`NodeHealth`].
    pub async fn of(
        &self,
        client: &kube::Client,
        nodes: &NodeHealth,
        ns: &str,
        jobs: &HashMap<String, Job>,
        name: &str,
        (journal_secret, run_secret): (Option<&str>, Option<&str>),
    ) -> kube::Result<Report> {
        if let Some(r) = self.cached(name) {
            return Ok(r);
        }
        let journal = |client: kube::Client| async move {
            match journal_secret {
                Some(secret) => read_journal(&client, ns, name, secret).await,
                None => Ok(Vec::new()),
            }
        };
        let result_key = run_secret.map(|secret| result_key(secret, name));
        let report = match jobs.get(name) {
            Some(job) => match observe::job_result(client, ns, job, result_key.as_deref()).await? {
                Some(mut ended) => {
                    // A pod that died without a result: what its journal recorded still counts.
                    if ended.segment.is_empty() {
                        ended.segment = journal(client.clone()).await?;
                    }
                    Report::Ended(Box::new(ended))
                }
                None => {
                    let recorded = journal(client.clone()).await?;
                    match node_health::pinned_node(job).and_then(|n| nodes.lost(&n)) {
                        Some(why) => {
                            // Deleted, so a node that comes back does not go on running it.
                            observe::delete_listed_job(client, ns, job).await?;
                            let mut ended = StepResult::failed(format!(
                                "{why} while the step ran: its pod can no longer report, so \
                                 the step failed and its Job {name} was deleted"
                            ));
                            ended.segment = recorded;
                            Report::Ended(Box::new(ended))
                        }
                        None => Report::Running(recorded),
                    }
                }
            },
            // Not in the (cached) list: a consistent read tells a lagging cache from a Job
            // that is gone.
            None if observe::job_is_gone(client, ns, name).await? => Report::Gone,
            None => Report::Running(Vec::new()),
        };
        self.seen
            .lock()
            .expect("not poisoned")
            .insert(name.to_string(), report.clone());
        Ok(report)
    }

    /// The report of Job `name` if it was looked up in this reconcile.
    pub fn cached(&self, name: &str) -> Option<Report> {
        self.seen.lock().expect("not poisoned").get(name).cloned()
    }
}

/// The result of step `node` in `report` from Job `job`, or None while it is not known yet.
pub fn outcome_of(report: &Report, node: &PlanNode, job: &str) -> Option<Outcome> {
    let fused = node.segment.is_some();
    let member = |members: &[MemberResult]| {
        members
            .iter()
            .find(|m| m.node_id == node.id)
            .map(|m| (m.result.clone(), Some((m.started_ms, m.finished_ms))))
    };
    match report {
        Report::Running(members) => member(members),
        Report::Ended(result) if !fused => Some((*result.clone(), None)),
        Report::Ended(result) => member(&result.segment).or_else(|| {
            Some((
                StepResult::failed(format!(
                    "its segment's Job {job} ended before this step ran: {}",
                    result.message
                )),
                None,
            ))
        }),
        Report::Gone => Some((
            StepResult::failed(format!(
                "its Job {job} was deleted before it reported a result"
            )),
            None,
        )),
    }
}

/// The node whose Job already runs fused step `node` (instance `key`, `attempt`): the one that
/// runs the member before it, when that one ran in this attempt. None: `node` is its
/// segment's head, or the steps before it could not start a Job (they failed before one
/// existed), so `node` launches a Job for itself and the rest of its segment.
pub fn covering_job(
    plan: &Plan,
    run: &StoredRun,
    node: &PlanNode,
    key: &[String],
    attempt: u32,
) -> Option<String> {
    let head = node.segment.as_deref()?;
    let members = plan.segment_members(head);
    let at = members.iter().position(|m| *m == node.id)?;
    let before = run.state.get(members.get(at.checked_sub(1)?)?, key);
    before.job_node.filter(|_| before.attempt == attempt)
}

/// The journal of segment Job `job`: the entries signed with the key derived from the run's
/// secret (an entry a ConfigMap writer forged, or changed, does not count).
async fn read_journal(
    client: &kube::Client,
    ns: &str,
    job: &str,
    run_secret: &str,
) -> kube::Result<Vec<MemberResult>> {
    let doc = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&journal_name(job))
        .await?
        .and_then(|cm| cm.data)
        .and_then(|mut d| d.remove(JOURNAL_KEY))
        .unwrap_or_default();
    Ok(verified(&journal_key(run_secret, job), job, &doc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pseudoflow_compiler::{compile, FlowId};
    use serde_json::json;

    fn plan() -> Plan {
        let id = FlowId {
            name: "f",
            namespace: Some("ns"),
        };
        let apply = |n: &str| json!({"type": "apply", "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}}]});
        compile(&id, &json!({"steps": [apply("a"), apply("b"), apply("c")]}))
            .expect("valid")
            .plan
    }

    fn member(node: &str, ok: bool) -> MemberResult {
        MemberResult {
            node_id: node.into(),
            result: StepResult {
                ok,
                message: format!("{node} done"),
                ..Default::default()
            },
            started_ms: 1_000,
            finished_ms: 3_000,
        }
    }

    #[test]
    fn a_running_segment_reports_the_steps_its_journal_records() {
        let p = plan();
        let (s0, s1) = (p.node("s0").unwrap(), p.node("s1").unwrap());
        let r = Report::Running(vec![member("s0", true)]);
        let (res, times) = outcome_of(&r, s0, "j").expect("recorded");
        assert!(res.ok && res.message == "s0 done");
        assert_eq!(times, Some((1_000, 3_000)));
        assert_eq!(outcome_of(&r, s1, "j"), None, "not recorded yet");
    }

    #[test]
    fn a_step_its_ended_segment_never_reached_fails_naming_the_job() {
        let p = plan();
        let ended = Report::Ended(Box::new(StepResult {
            ok: false,
            message: "the step's Job ended without a result (BackoffLimitExceeded)".into(),
            segment: vec![member("s0", true)],
            ..Default::default()
        }));
        assert!(outcome_of(&ended, p.node("s0").unwrap(), "j").unwrap().0.ok);
        let (s2, _) = outcome_of(&ended, p.node("s2").unwrap(), "j").unwrap();
        assert!(!s2.ok);
        assert!(
            s2.message.contains("Job j ended before this step ran")
                && s2.message.contains("BackoffLimitExceeded"),
            "{}",
            s2.message
        );
    }

    #[test]
    fn a_member_is_covered_by_the_job_of_the_member_before_it_in_the_same_attempt() {
        let p = plan();
        let mut run = StoredRun::default();
        let s1 = p.node("s1").unwrap();
        assert_eq!(covering_job(&p, &run, p.node("s0").unwrap(), &[], 1), None);
        assert_eq!(
            covering_job(&p, &run, s1, &[], 1),
            None,
            "the head failed before its Job existed: s1 launches"
        );
        let head = run.state.entry("s0", &[]);
        head.attempt = 1;
        head.job_node = Some("s0".into());
        assert_eq!(covering_job(&p, &run, s1, &[], 1).as_deref(), Some("s0"));
        assert_eq!(covering_job(&p, &run, s1, &[], 2), None, "another attempt");
    }
}
