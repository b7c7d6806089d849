//! The run state lives in the API — a Secret per flow owned by the flow — so a restarted
//! controller continues exactly where the last one stopped. A Secret, not a ConfigMap: it holds
//! the step outputs and the steps `include` fetched, which may come from Secrets, and `view` may
//! read ConfigMaps. Controllers before this one kept it in a ConfigMap of the same name; such a
//! run is read from there once and saved as a Secret.

use crate::labels::{MANAGED_BY, MANAGED_BY_KEY};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, DynamicObject, PostParams};
use kube::Resource;

const KEY: &str = "run.json";

pub use crate::walk::StoredRun;

/// Type of run-state Secrets, so they are recognisable among a namespace's Secrets.
pub const SECRET_TYPE: &str = "ops.example.com/run-state";

/// Name of a flow's run-state Secret (and of the ConfigMap older controllers used).
pub fn name(flow: &str) -> String {
    pseudoflow_compiler::names::bounded_name(
        &format!("{flow}-run"),
        pseudoflow_compiler::names::stable_hash(&[flow, "run-state"]),
        63,
    )
}

/// What [`load`] found under the flow's run-state name.
#[derive(Debug)]
pub enum Loaded {
    /// Nothing: the first run.
    Nothing,
    /// This flow object's run, with the resourceVersion a save must name (None: it was read
    /// from a legacy ConfigMap, the next save creates the Secret).
    Run(Box<StoredRun>, Option<String>),
    /// A Secret this flow object does not own (an earlier flow of the same name, not yet
    /// garbage-collected, or one planted by someone else): its resourceVersion, so the next
    /// save replaces it. Nothing in it is trusted.
    NotOurs(String),
    /// This flow's own state, but it cannot be read (written by a newer controller, or
    /// damaged): the run must fail, not restart from scratch on every reconcile.
    Unreadable(String, String),
}

/// Loads this flow object's stored run.
pub async fn load(
    client: &kube::Client,
    ns: &str,
    flow: &str,
    flow_uid: &str,
) -> kube::Result<Loaded> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let name = name(flow);
    let owned = |refs: &Option<
        Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    >| { refs.iter().flatten().any(|o| o.uid == flow_uid) };
    if let Some(secret) = secrets.get_opt(&name).await? {
        let rv = secret.metadata.resource_version.clone().unwrap_or_default();
        if !owned(&secret.metadata.owner_references) {
            return Ok(Loaded::NotOurs(rv));
        }
        let text = secret
            .data
            .as_ref()
            .and_then(|d| d.get(KEY))
            .map(|b| b.0.as_slice());
        return Ok(match text.map(serde_json::from_slice::<StoredRun>) {
            Some(Ok(run)) => Loaded::Run(Box::new(run), Some(rv)),
            Some(Err(e)) => Loaded::Unreadable(rv, e.to_string()),
            None => Loaded::Unreadable(rv, format!("it has no key {KEY}")),
        });
    }
    // A run stored by a controller before run state moved to Secrets.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let legacy = cms
        .get_opt(&name)
        .await?
        .filter(|cm| owned(&cm.metadata.owner_references));
    let run = legacy
        .and_then(|cm| cm.data)
        .and_then(|d| d.get(KEY).and_then(|t| serde_json::from_str(t).ok()));
    Ok(match run {
        Some(r) => Loaded::Run(Box::new(r), None),
        None => Loaded::Nothing,
    })
}

/// Saves the run, owned by `flow` (so it goes with it); `resource_version` guards against two
/// writers (a conflict makes the reconcile retry from fresh state).
pub async fn save(
    client: &kube::Client,
    flow: &DynamicObject,
    run: &StoredRun,
    resource_version: Option<&str>,
) -> kube::Result<String> {
    let ns = flow.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let name = name(&flow.metadata.name.clone().unwrap_or_default());
    let owner = flow
        .controller_owner_ref(&super::flow_resource())
        .expect("flows have uid");
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.clone());
    secret.metadata.owner_references = Some(vec![owner]);
    secret.metadata.labels = Some([(MANAGED_BY_KEY.to_string(), MANAGED_BY.to_string())].into());
    secret.type_ = Some(SECRET_TYPE.to_string());
    secret.data = Some(
        [(
            KEY.to_string(),
            ByteString(serde_json::to_vec(run).expect("run serialises")),
        )]
        .into(),
    );
    let saved = match resource_version {
        Some(rv) => {
            secret.metadata.resource_version = Some(rv.to_string());
            api.replace(&name, &PostParams::default(), &secret).await?
        }
        None => api.create(&PostParams::default(), &secret).await?,
    };
    Ok(saved.metadata.resource_version.unwrap_or_default())
}
