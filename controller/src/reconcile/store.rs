//! The run state lives in the API — a ConfigMap per flow owned by the flow — so a restarted
//! controller continues exactly where the last one stopped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::Resource;
use pseudoflow_crd::PseudoFlow;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::walk::RunState;

const KEY: &str = "run.json";

/// Everything about the current run that is not in the plan.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredRun {
    pub run_id: String,
    pub generation: i64,
    #[serde(default)]
    pub trigger: Option<String>,
    /// The raw spec the run started with: a run is driven with it to its end, whatever edits
    /// come meanwhile (absent in runs stored by older controllers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<Value>,
    pub started_at: i64,
    #[serde(default)]
    pub finished_at: Option<i64>,
    /// Step outputs (`var`, `varPerNode`, `eval`, `template`), flow-wide.
    #[serde(default)]
    pub vars: BTreeMap<String, Value>,
    pub state: RunState,
    /// Steps `include`/`includeFlow` fetched this run, by the fetching node's id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub includes: BTreeMap<String, super::includes::Included>,
    /// `concurrencyPolicy: Allow`: earlier runs still running beside this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub beside: Vec<StoredRun>,
    /// Set once the end of the run was counted in metrics and Events.
    #[serde(default)]
    pub reported: bool,
}

/// Name of a flow's run-state ConfigMap.
pub fn name(flow: &str) -> String {
    pseudoflow_compiler::names::bounded_name(
        &format!("{flow}-run"),
        pseudoflow_compiler::names::stable_hash(&[flow, "run-state"]),
        63,
    )
}

/// Loads this flow object's stored run with the ConfigMap's resourceVersion (for optimistic
/// concurrency). A ConfigMap this flow object does not own (left by an earlier flow of the same
/// name, not yet garbage-collected) or cannot read holds no run of it: then only its
/// resourceVersion comes back, so the next save replaces it.
pub async fn load(
    api: &Api<ConfigMap>,
    flow: &str,
    flow_uid: &str,
) -> kube::Result<(Option<(StoredRun, String)>, Option<String>)> {
    let Some(cm) = api.get_opt(&name(flow)).await? else {
        return Ok((None, None));
    };
    let rv = cm.metadata.resource_version.clone().unwrap_or_default();
    let owned = cm
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == flow_uid);
    let run = cm
        .data
        .as_ref()
        .and_then(|d| d.get(KEY))
        .and_then(|t| serde_json::from_str(t).ok())
        .filter(|_| owned);
    Ok(match run {
        Some(r) => (Some((r, rv)), None),
        None => (None, Some(rv)),
    })
}

/// Saves the run; `resource_version` guards against two writers (a conflict makes the reconcile
/// retry from fresh state).
pub async fn save(
    api: &Api<ConfigMap>,
    flow: &PseudoFlow,
    run: &StoredRun,
    resource_version: Option<&str>,
) -> kube::Result<String> {
    let name = name(&flow.metadata.name.clone().unwrap_or_default());
    let owner = flow.controller_owner_ref(&()).expect("flows have uid");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.clone());
    cm.metadata.owner_references = Some(vec![owner]);
    cm.metadata.labels = Some(
        [(
            "app.kubernetes.io/managed-by".to_string(),
            "pseudoflow".to_string(),
        )]
        .into(),
    );
    cm.data = Some(
        [(
            KEY.to_string(),
            serde_json::to_string(run).expect("run serialises"),
        )]
        .into(),
    );
    let saved = match resource_version {
        Some(rv) => {
            cm.metadata.resource_version = Some(rv.to_string());
            api.replace(&name, &PostParams::default(), &cm).await?
        }
        None => api.create(&PostParams::default(), &cm).await?,
    };
    Ok(saved.metadata.resource_version.unwrap_or_default())
}
