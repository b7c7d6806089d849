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
    /// After a failed write, later writes are not tried (one warning, not one per step).
    broken: bool,
}

impl Journal {
    /// A journal that records nothing (local runs, tests).
    pub fn in_memory() -> Self {
        Journal {
            target: None,
            entries: Vec::new(),
            broken: false,
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
            broken: false,
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

    /// Records `member` (in memory, and in the journal ConfigMap when there is one).
    pub async fn record(&mut self, ctx: &ExecCtx, member: &MemberResult) {
        let Some((key, job)) = self.target.clone() else {
            return;
        };
        self.entries.push(sign(&key, &job, member.clone()));
        if self.broken {
            return;
        }
        if let Err(e) = self.write(ctx, &job).await {
            self.broken = true;
            tracing::warn!(
                error = %e,
                "cannot record progress in the Job's journal: the flow's status shows this \
                 segment's steps only when it ends, and a replacement pod would run it from \
                 its start (grant the flow's ServiceAccount patch on configmaps)"
            );
        }
    }

    async fn write(&self, ctx: &ExecCtx, job: &str) -> Result<(), String> {
        let client = ctx.client().await.map_err(|e| e.to_string())?;
        let ns = ctx.namespace();
        let name = journal_name(job);
        let flow = &ctx.input.flow;
        let mut labels = BTreeMap::new();
        labels.insert(LABEL_MANAGED_BY, MANAGED_BY.to_string());
        labels.insert(LABEL_FLOW, label_value(&flow.name));
        labels.insert(LABEL_RUN, ctx.input.run_id.clone());
        labels.insert(LABEL_ROLE, JOURNAL_ROLE.to_string());
        let doc = serde_json::to_string(&self.entries).map_err(|e| e.to_string())?;
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
            .map_err(|e| e.to_string())
    }
}
