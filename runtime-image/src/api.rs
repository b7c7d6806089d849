//! Dynamic-object helpers: find a kind's resource and scope by discovery (again when it is
//! unknown, so a CRD applied earlier in the same flow is found), build `Api<DynamicObject>`
//! for it in the right namespace, and read objects treating 404 as "absent".

use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{pinned_kind, Scope};
use pseudoflow_crd::common::default_api_version;

use crate::context::ExecCtx;
use crate::error::{is_not_found, Call, StepError};
pub use crate::kind::Resolved;

/// Delays between discovery attempts for a kind the server does not (yet) serve: a CRD that was
/// just established can take a moment to show up in discovery.
const DISCOVERY_RETRIES: [u64; 4] = [250, 750, 1500, 3000];

/// The apiVersion to use: given, else the default for built-in kinds.
pub fn api_version_for(api_version: Option<&str>, kind: &str) -> Result<String, StepError> {
    match api_version.filter(|v| !v.is_empty()) {
        Some(v) => Ok(v.to_string()),
        None => default_api_version(kind)
            .map(str::to_string)
            .ok_or_else(|| StepError::failed(format!("kind {kind:?} needs an apiVersion"))),
    }
}

/// Splits `group/version` (or a core `version`) into a GroupVersionKind.
pub fn gvk(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

/// Finds the resource serving `kind` in `api_version`, by discovery; retried with a short
/// backoff when unknown, and cached for the rest of this execution.
pub async fn resolve(ctx: &ExecCtx, api_version: &str, kind: &str) -> Result<Resolved, StepError> {
    resolve_opt(ctx, api_version, kind, true)
        .await?
        .ok_or_else(|| {
            StepError::failed(format!(
                "the API server does not serve kind {kind} in {api_version}"
            ))
        })
}

/// Like [`resolve`], but Ok(None) when the kind is not served (after the retries when `retry`):
/// for deletion, an unserved kind means there is nothing to delete.
pub async fn resolve_opt(
    ctx: &ExecCtx,
    api_version: &str,
    kind: &str,
    retry: bool,
) -> Result<Option<Resolved>, StepError> {
    let key = format!("{api_version}/{kind}");
    if let Some(r) = ctx.kinds.get(&key) {
        return Ok(Some(r));
    }
    let client = ctx.client().await?;
    let want = gvk(api_version, kind);
    let mut delays = DISCOVERY_RETRIES[..if retry { DISCOVERY_RETRIES.len() } else { 0 }].iter();
    let found = loop {
        match pinned_kind(&client, &want).await {
            Ok((ar, caps)) => {
                break Resolved {
                    ar,
                    namespaced: caps.scope == Scope::Namespaced,
                }
            }
            Err(e) if is_unknown_kind(&e) => match delays.next() {
                Some(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
                None => return Ok(None),
            },
            Err(e) => {
                let call = Call {
                    verb: "get",
                    resource: "discovery",
                    name: api_version,
                    namespace: None,
                };
                return Err(ctx.api_err(e, call));
            }
        }
    };
    ctx.kinds.insert(key, found.clone());
    Ok(Some(found))
}

/// Forgets every cached kind, so the next [`resolve`] asks the server again.
pub fn forget_kinds(ctx: &ExecCtx) {
    ctx.kinds.clear();
}

fn is_unknown_kind(e: &kube::Error) -> bool {
    is_not_found(e) || matches!(e, kube::Error::Discovery(_))
}

/// The namespace an object lives in: None for cluster-scoped kinds, else the given one or the
/// flow's namespace.
pub fn namespace_for(ctx: &ExecCtx, r: &Resolved, given: Option<&str>) -> Option<String> {
    r.namespaced.then(|| {
        given
            .filter(|n| !n.is_empty())
            .unwrap_or(ctx.namespace())
            .to_string()
    })
}

/// An API handle for a resolved kind in a namespace (or cluster-wide).
pub async fn api_for(
    ctx: &ExecCtx,
    r: &Resolved,
    ns: Option<&str>,
) -> Result<Api<DynamicObject>, StepError> {
    let client = ctx.client().await?;
    Ok(match ns {
        Some(ns) => Api::namespaced_with(client, ns, &r.ar),
        None => Api::all_with(client, &r.ar),
    })
}

/// Reads one object; Ok(None) when it does not exist.
pub async fn get_opt(
    ctx: &ExecCtx,
    api: &Api<DynamicObject>,
    r: &Resolved,
    name: &str,
    ns: Option<&str>,
) -> Result<Option<DynamicObject>, StepError> {
    match api.get_opt(name).await {
        Ok(o) => Ok(o),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(ctx.api_err(e, call("get", r, name, ns))),
    }
}

/// `name` when it is not empty. An empty one (a `${...}` that produced nothing) would reach
/// the client, which refuses it naming no field (`A non-empty name is required`).
pub fn require_name<'a>(field: &str, name: &'a str) -> Result<&'a str, StepError> {
    if name.is_empty() {
        return Err(StepError::failed(format!(
            "{field} is empty (did a ${{...}} in it produce an empty string?)"
        )));
    }
    Ok(name)
}

/// Describes an API call on a resolved kind, for error messages.
pub fn call<'a>(verb: &'a str, r: &'a Resolved, name: &'a str, ns: Option<&'a str>) -> Call<'a> {
    Call {
        verb,
        resource: &r.ar.plural,
        name,
        namespace: ns,
    }
}

/// `Kind/namespace/name` (or `Kind/name` when cluster-scoped), as results list objects.
pub fn display(kind: &str, ns: Option<&str>, name: &str) -> String {
    match ns {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// How a comparison on objects of `r` may show what it read: never a Secret's values.
pub fn shown(r: &Resolved) -> crate::compare::Shown {
    crate::compare::Shown::for_kind(&r.ar.group, &r.ar.kind)
}

/// The whole object as JSON, for jsonPath and readiness checks.
pub fn to_json(obj: &DynamicObject) -> serde_json::Value {
    serde_json::to_value(obj).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_name_is_refused_naming_its_field() {
        assert_eq!(require_name("target.name", "n1").unwrap(), "n1");
        let e = require_name("target.name", "").unwrap_err().to_string();
        assert!(e.contains("target.name is empty"), "{e}");
    }

    #[test]
    fn api_versions_default_from_kind_and_split_into_group_and_version() {
        assert_eq!(api_version_for(None, "Node").unwrap(), "v1");
        assert_eq!(api_version_for(None, "Deployment").unwrap(), "apps/v1");
        assert!(api_version_for(None, "Widget").is_err());
        let g = gvk("apps/v1", "Deployment");
        assert_eq!((g.group.as_str(), g.version.as_str()), ("apps", "v1"));
        let g = gvk("v1", "Pod");
        assert_eq!((g.group.as_str(), g.version.as_str()), ("", "v1"));
        assert_eq!(display("Pod", Some("ns"), "p"), "Pod/ns/p");
        assert_eq!(display("Node", None, "n"), "Node/n");
    }
}
