//! Connecting as kubectl does: `--kubeconfig` (else `$KUBECONFIG`, else `~/.kube/config`, else
//! in-cluster), `--context`, `-n` (else the context's namespace, else `default`).

use anyhow::Context as _;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::Global;

/// A client and the namespace the verb works in.
#[derive(Clone)]
pub struct Kube {
    /// The client (impersonating, when asked).
    pub client: Client,
    /// `-n`, else the context's namespace.
    pub namespace: String,
}

/// The client configuration `g` names, impersonating `impersonate` when given.
pub async fn config(g: &Global, impersonate: Option<String>) -> anyhow::Result<Config> {
    let opts = KubeConfigOptions {
        context: g.context.clone(),
        ..Default::default()
    };
    let mut config = match &g.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &opts).await?
        }
        None if g.context.is_some() => Config::from_kubeconfig(&opts).await?,
        None => Config::infer().await?,
    };
    if let Some(user) = impersonate {
        config.auth_info.impersonate = Some(user);
    }
    Ok(config)
}

/// Connects as `g` says.
pub async fn connect(g: &Global, impersonate: Option<String>) -> anyhow::Result<Kube> {
    let config = config(g, impersonate).await?;
    let namespace = g
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config)?;
    Ok(Kube { client, namespace })
}

/// The PseudoFlows of `ns` (all namespaces with `None`), untyped: a flow whose spec does not
/// deserialize must still be listed.
pub fn flows(client: &Client, ns: Option<&str>) -> Api<DynamicObject> {
    let ar = ApiResource::erase::<pseudoflow_crd::PseudoFlow>(&());
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// The flow `name` in the verb's namespace, or an error naming it.
pub async fn flow(k: &Kube, name: &str) -> anyhow::Result<DynamicObject> {
    flows(&k.client, Some(&k.namespace))
        .get(name)
        .await
        .with_context(|| format!("pseudoflow {name:?} in namespace {:?}", k.namespace))
}

/// The status of a flow object, typed (empty when absent or unreadable).
pub fn status(flow: &DynamicObject) -> pseudoflow_crd::PseudoFlowStatus {
    flow.data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default()
}

/// The names of what `api` lists with `params`, none when the list fails: what completion and
/// `plan`'s node targets want, where a failed list must not end the command.
pub async fn names<K>(api: &Api<K>, params: &ListParams) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(params)
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|o| o.meta().name.clone())
                .collect()
        })
        .unwrap_or_default()
}
