//! Server-side apply of arbitrary objects (any kind the cluster serves), for tests and the demo
//! that set clusters up from YAML the way `kubectl apply --server-side` would.

use anyhow::{Context, Result};
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{pinned_kind, Scope};
use kube::Client;
use serde_json::Value;

/// Applies one object (JSON); a namespaced object without a namespace goes to `default_ns`.
pub async fn apply_value(client: &Client, v: Value, default_ns: Option<&str>) -> Result<()> {
    let mut obj: DynamicObject = serde_json::from_value(v)?;
    let gvk = GroupVersionKind::try_from(obj.types.as_ref().context("apiVersion/kind")?)?;
    let (ar, caps) = pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("kind {}", gvk.kind))?;
    if obj.metadata.namespace.is_none() {
        obj.metadata.namespace = default_ns.map(str::to_string);
    }
    let api: Api<DynamicObject> = match (caps.scope, obj.metadata.namespace.as_deref()) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    };
    let name = obj.metadata.name.clone().context("metadata.name")?;
    api.patch(
        &name,
        &PatchParams::apply("pseudoflow-testenv").force(),
        &Patch::Apply(&obj),
    )
    .await
    .with_context(|| format!("applying {} {name}", gvk.kind))?;
    Ok(())
}

/// Applies every document of a (multi-document) YAML text.
pub async fn apply_text(client: &Client, text: &str, default_ns: Option<&str>) -> Result<()> {
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            apply_value(client, v, default_ns).await?;
        }
    }
    Ok(())
}
