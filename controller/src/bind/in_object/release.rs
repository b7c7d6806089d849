//! Letting go of the finalizers a flow recorded in its objects put on them (for its `onDelete`,
//! [`super::deleted`]) when the flow is deleted, no longer bound, or no longer compiles: there
//! is no child flow naming each object (as `record: Child` has), so the flow notes on itself
//! which kind it finalizes, where, and as which ServiceAccount ([`Finalizes`], written before
//! it puts a finalizer), and its release lists the objects of that kind and removes its own
//! finalizer from each, as that account. No `onDelete` runs: the objects stay as they are.
//!
//! The note is the flow's annotation, so whoever may edit the flow may edit it: it can only
//! name where *this* flow's own finalizer is removed (a name no other flow's finalizer has),
//! as one of the flow's namespace's ServiceAccounts, so it cannot make the controller hold or
//! release anything of another's.

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::bind::{decode, object, pages, Binder};
use crate::flow::{finalizer, Error, Reconciling};

/// Annotation on a bound flow recorded in its objects that puts finalizers on them.
pub const FINALIZES_ANNOTATION: &str = "ops.example.com/finalizes";

/// Which objects carry the flow's finalizer: a kind, in one namespace or all, and the account
/// that put it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Finalizes {
    /// The kind's API version, kind and plural.
    pub api_version: String,
    /// See [`Finalizes::api_version`].
    pub kind: String,
    /// See [`Finalizes::api_version`].
    pub plural: String,
    /// The objects' namespace (None: every namespace, or a cluster-scoped kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The flow's ServiceAccount (in the flow's namespace).
    pub service_account: String,
}

/// Writes `f` on the bound flow `r` unless it says so already.
pub(crate) async fn note(r: &Reconciling<'_, Binder>, f: &Finalizes) -> Result<(), Error> {
    let raw = serde_json::to_string(f).expect("serializable");
    let annotations = r.flow.metadata.annotations.as_ref();
    if annotations.and_then(|a| a.get(FINALIZES_ANNOTATION)) == Some(&raw) {
        return Ok(());
    }
    let patch = json!({"metadata": {"annotations": {FINALIZES_ANNOTATION: raw}}});
    let pp = PatchParams::default();
    r.flows
        .patch(r.flow_id.name, &pp, &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Removes the bound flow `r`'s finalizer from every object its note names, as the account it
/// names; nothing when it has no note (it never put a finalizer on an object).
pub(crate) async fn release(r: &Reconciling<'_, Binder>) -> Result<(), Error> {
    let annotations = r.flow.metadata.annotations.as_ref();
    let Some(raw) = annotations.and_then(|a| a.get(FINALIZES_ANNOTATION)) else {
        return Ok(());
    };
    let Ok(f) = serde_json::from_str::<Finalizes>(raw) else {
        return Ok(());
    };
    let client = r.ctx.accounts.client_as(r.ns(), &f.service_account);
    let client = client.map_err(Error::Bind)?;
    let (group, version) = f
        .api_version
        .split_once('/')
        .unwrap_or(("", &f.api_version));
    let ar = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: f.api_version.clone(),
        kind: f.kind.clone(),
        plural: f.plural.clone(),
    };
    let all: Api<DynamicObject> = match &f.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let fin = object::finalizer_name(r.ns(), r.flow_id.name);
    let mut token: Option<String> = None;
    loop {
        let page = pages::raw_page(&all, &ListParams::default(), token.as_deref()).await;
        let page = page.map_err(|e| Error::Bind(format!("listing {}: {e}", f.kind)))?;
        for (i, item) in page.items.iter().enumerate() {
            // Only its metadata is read: an object too deep to decode is let go too.
            let meta = match decode::object(item.get(), i) {
                Ok(o) => Some(o.metadata),
                Err(u) => u.meta.map(|m| *m),
            };
            let Some(meta) = meta.filter(|m| m.finalizers.iter().flatten().any(|x| *x == fin))
            else {
                continue;
            };
            let obj = DynamicObject {
                types: None,
                metadata: meta,
                data: json!({}),
            };
            let api = match &obj.metadata.namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
                None => Api::all_with(client.clone(), &ar),
            };
            match finalizer::set_named(&api, &obj, &fin, false).await {
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                other => other?,
            }
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(());
        }
    }
}
