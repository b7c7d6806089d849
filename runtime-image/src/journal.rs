//! The executor's side of a segment's journal ([`pseudoflow_crd::protocol::journal`]): read
//! what an earlier pod of the same Job recorded, and record each step as it ends. Writing needs
//! `patch` on ConfigMaps in the flow's namespace; without it the segment still runs and
//! reports at its end, but the controller sees no progress until then and a replacement pod
//! runs the segment from its start (the executor logs a warning).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use pseudoflow_crd::protocol::journal::{
    journal_name, sign, verified, Entry, JOURNAL_KEY, JOURNAL_ROLE, LABEL_ROLE,
};
use pseudoflow_crd::protocol::{
    label_value, MemberResult, LABEL_FLOW, LABEL_MANAGED_BY, LABEL_RUN, MANAGED_BY,
};
use serde_json::json;

use crate::context::ExecCtx;

/// What this Job recorded so far, and where to record more.
pub struct Journal {
    /// Signing key and Job name; None: nothing is read or written (a local run).
    target: Option<(String, String)>,
    entries: Vec<Entry>,
    /// A failed write was reported (one warning, not one per step).
    warned: bool,
}

impl Journal {
    /// A journal that records nothing (local runs, tests).
    pub fn in_memory() -> Self {
        Journal {
            target: None,
            entries: Vec::new(),
            warned: false,
        }
    }

    /// Opens the journal of Job `job` when the input carries a signing key, keeping only the
    /// entries validly signed for this Job.
    pub async fn open(ctx: &ExecCtx, job: &str) -> Self {
        let Some(key) = ctx.input.journal_key.clone() else {
            return Self::in_memory();
        };
        let mut journal = Journal {
            target: Some((key.clone(), job.to_string())),
            entries: Vec::new(),
            warned: false,
        };
        let Ok(client) = ctx.client().await else {
            return journal;
        };
        let api: Api<ConfigMap> = Api::namespaced(client, ctx.namespace());
        match api.get_opt(&journal_name(job)).await {
            Ok(Some(cm)) => {
                let doc = cm
                    .data
                    .and_then(|d| d.get(JOURNAL_KEY).cloned())
                    .unwrap_or_default();
                journal.entries = verified(&key, job, &doc)
                    .into_iter()
                    .map(|m| sign(&key, job, m))
                    .collect();
                if !journal.entries.is_empty() {
                    tracing::info!(
                        recorded = journal.entries.len(),
                        "resuming: an earlier pod of this Job recorded steps"
                    );
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read this Job's journal"),
        }
        journal
    }

    /// The recorded result of step `node_id`, if an earlier pod of this Job ran it.
    pub fn recorded(&self, node_id: &str) -> Option<&MemberResult> {
        self.entries
            .iter()
            .map(|e| &e.member)
            .find(|m| m.node_id == node_id)
    }

    /// Records `member` (in memory, and in the journal ConfigMap when there is one) before the
    /// next step starts: a transient failure (the API server restarting) is retried for about
    /// 15 s, so a pod that dies next does not run this step again; a refusal (no rights) is
    /// not retried, and later steps try again.
    pub async fn record(&mut self, ctx: &ExecCtx, member: &MemberResult) {
        let Some((key, job)) = self.target.clone() else {
            return;
        };
        self.entries.push(sign(&key, &job, member.clone()));
        let mut delay = std::time::Duration::from_millis(500);
        for attempt in 1.. {
            match self.write(ctx, &job).await {
                Ok(()) => return,
                Err(e) if e.transient && attempt < 6 => {
                    tracing::info!(error = %e.message, "recording progress: retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(e) => {
                    if !self.warned {
                        self.warned = true;
                        tracing::warn!(
                            error = %e.message,
                            "cannot record progress in the Job's journal: until it can, the \
                             flow's status shows this segment's steps only when it ends, and a \
                             replacement pod would run them again (the flow's ServiceAccount \
                             needs patch on configmaps)"
                        );
                    }
                    return;
                }
            }
        }
    }

    async fn write(&self, ctx: &ExecCtx, job: &str) -> Result<(), WriteError> {
        let client = ctx.client().await.map_err(|e| WriteError {
            message: e.to_string(),
            transient: false,
        })?;
        let ns = ctx.namespace();
        let name = journal_name(job);
        let flow = &ctx.input.flow;
        let mut labels = BTreeMap::new();
        labels.insert(LABEL_MANAGED_BY, MANAGED_BY.to_string());
        labels.insert(LABEL_FLOW, label_value(&flow.name));
        labels.insert(LABEL_RUN, ctx.input.run_id.clone());
        labels.insert(LABEL_ROLE, JOURNAL_ROLE.to_string());
        let doc = serde_json::to_string(&self.entries).expect("entries serialise");
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name, "namespace": ns, "labels": labels,
                // Goes away with the flow; no blockOwnerDeletion (needs rights on the flow).
                "ownerReferences": [{
                    "apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
                    "name": flow.name, "uid": flow.uid,
                }],
            },
            "data": {JOURNAL_KEY: doc},
        });
        Api::<ConfigMap>::namespaced(client, ns)
            .patch(
                &name,
                &PatchParams::apply("pseudoflow-journal").force(),
                &Patch::Apply(&cm),
            )
            .await
            .map(|_| ())
            .map_err(|e| WriteError {
                // Refused (no rights, invalid): retrying changes nothing. Anything else —
                // connection refused, timeouts, 5xx while the API server restarts — may pass.
                transient: !matches!(&e, kube::Error::Api(s) if (400..500).contains(&s.code)),
                message: e.to_string(),
            })
    }
}

/// Why the journal could not be written.
struct WriteError {
    message: String,
    transient: bool,
}
