//! Opening a bound flow's binding for one reconcile, as its ServiceAccount: the kind and the
//! related kinds discovered, the rights checked, the watches running. Whatever refuses the
//! binding is found here, before any object is served.

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use pseudoflow_crd::bind::Bind;
use pseudoflow_crd::selector::{Requirement, Selector};
use pseudoflow_crd::PseudoFlowSpec;

use super::Binding;
use crate::bind::watched::Watched;
use crate::bind::{access, claim, in_object, object, watch, Binder};
use crate::flow::Reconciling;
use crate::labels::{MANAGED_BY, MANAGED_BY_KEY};

impl<'a> Binding<'a> {
    /// The binding, or why it cannot be served: no client for the ServiceAccount, an unknown
    /// kind, a right the ServiceAccount lacks, a refused watch.
    pub(super) async fn open(
        r: &'a Reconciling<'a, Binder>,
        flows: &'a Api<DynamicObject>,
        spec: &PseudoFlowSpec,
        bind: &'a Bind,
    ) -> Result<Binding<'a>, String> {
        let ns = r.ns();
        let sa = spec.service_account_name.as_deref().unwrap_or("default");
        let client = r.ctx.accounts.client_as(ns, sa)?;
        let (ar, namespaced) = r.ctx.accounts.kind(&client, ns, sa, bind).await?;
        let scope = (namespaced && !bind.all_namespaces).then_some(ns);
        let objects = match scope {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let who = format!("{ns}/{sa}");
        // Watch fields outside metadata can change without the object's generation moving.
        let every_change = bind
            .watch_fields
            .iter()
            .any(|p| !p.trim_start_matches('.').starts_with("metadata."));
        let what = format!(
            "{}/{} {scope:?} as {who}{}",
            bind.api_version,
            bind.kind,
            if every_change { ", every change" } else { "" }
        );
        let watches = &r.own.watches;
        match watches.running(r.uid, &what) {
            Some(Some(refusal)) => return Err(refusal),
            // Its rights were checked when it started; a revoked one shows as a refused watch.
            Some(None) => {}
            None => {
                let writes = bind.status.writes_anything();
                let missing = access::missing_right(&client, &who, &ar, scope, writes).await;
                if let Some(m) = missing.map_err(|e| format!("asking what {who} may do: {e}"))? {
                    return Err(m);
                }
                watches.start(watch::Target {
                    uid: r.uid.to_string(),
                    flow: (ns.to_string(), r.flow_id.name.to_string()),
                    what,
                    api: watched_api(&client, scope, &ar),
                    every_change,
                });
            }
        }
        let related_kinds = open_related(r, &client, bind, &who).await?;
        let mut selector = match &bind.selector {
            Some(s) => s.parse().map_err(|e| e.to_string())?,
            None => Selector(vec![]),
        };
        // Never what runs write (result and journal ConfigMaps, executor pods): served, each
        // would start a run writing more of them (docs/decisions.md#what-a-flow-cannot-bind-to).
        selector.0.push(not_written_by_runs());
        let finalizes = in_object::release::Finalizes {
            api_version: bind.api_version.clone(),
            kind: bind.kind.clone(),
            plural: ar.plural.clone(),
            namespace: scope.map(str::to_string),
            service_account: sa.to_string(),
        };
        Ok(Binding {
            finalizes,
            related_kinds,
            r,
            bind,
            flows,
            objects,
            ar,
            selector,
            finalizer: object::finalizer_name(ns, r.flow_id.name),
            mark: claim::mark_key(ns, r.flow_id.name),
            assign: None,
            listed: Default::default(),
        })
    }
}

/// The requirement that keeps what the operator's runs write (labelled
/// `app.kubernetes.io/managed-by=pseudoflow`) out of every binding.
fn not_written_by_runs() -> Requirement {
    Requirement::NotEquals(MANAGED_BY_KEY.into(), MANAGED_BY.into())
}

/// Opens the watches on the related kinds (`bind.related`, one per kind, as the flow's
/// ServiceAccount, after checking its rights) and stops those of kinds no longer related;
/// returns the kinds' resources.
async fn open_related(
    r: &Reconciling<'_, Binder>,
    client: &kube::Client,
    bind: &Bind,
    who: &str,
) -> Result<BTreeMap<(String, String), (ApiResource, bool)>, String> {
    let ns = r.ns();
    let sa = who.split_once('/').map(|(_, sa)| sa).unwrap_or("default");
    let watches = &r.own.watches;
    let mut kinds = BTreeMap::new();
    let mut keys = Vec::new();
    for rel in &bind.related {
        let id = (rel.api_version.clone(), rel.kind.clone());
        if kinds.contains_key(&id) {
            continue;
        }
        let (ar, namespaced) = r
            .ctx
            .accounts
            .kind_of(client, ns, sa, &rel.api_version, &rel.kind)
            .await?;
        let scope = (namespaced && !bind.all_namespaces).then_some(ns);
        let key = watch::related_key(r.uid, &rel.api_version, &rel.kind);
        // A related object's content is what its bound objects read: every change counts.
        let what = format!(
            "{}/{} {scope:?} as {who}, every change",
            rel.api_version, rel.kind
        );
        match watches.running(&key, &what) {
            Some(Some(refusal)) => return Err(refusal),
            Some(None) => {}
            None => {
                let missing = access::missing_related_right(client, who, &ar, scope).await;
                if let Some(m) = missing.map_err(|e| format!("asking what {who} may do: {e}"))? {
                    return Err(m);
                }
                watches.start(watch::Target {
                    uid: key.clone(),
                    flow: (ns.to_string(), r.flow_id.name.to_string()),
                    what,
                    api: watched_api(client, scope, &ar),
                    every_change: true,
                });
            }
        }
        keys.push(key);
        kinds.insert(id, (ar, namespaced));
    }
    watches.keep_related(r.uid, &keys);
    Ok(kinds)
}

/// The objects of kind `ar` in `scope` (all namespaces: `None`), as a watch decodes them.
fn watched_api(client: &kube::Client, scope: Option<&str>, ar: &ApiResource) -> Api<Watched> {
    match scope {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}
