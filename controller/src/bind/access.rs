//! Everything done to objects of a bound kind — watching, listing, patching finalizers and
//! status — is done as the flow's ServiceAccount, by impersonation (docs/security.md): the
//! controller holds no rights on the kind, only `impersonate` on ServiceAccounts. A flow whose
//! ServiceAccount lacks a right fails naming it, checked with SelfSubjectAccessReviews (which
//! every identity may ask about itself) before anything is watched.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::discovery::ApiResource;
use kube::Client;

/// The rights a bound flow's ServiceAccount needs on its kind: (verb, subresource); the last
/// only when it writes the objects' status.
pub const NEEDED: [(&str, &str); 4] = [
    ("list", ""),
    ("watch", ""),
    ("patch", ""),
    ("patch", "status"),
];

/// The rights of [`NEEDED`] a binding uses: all, or all but `patch status` when it writes no
/// status (kinds without a status subresource, such as ConfigMaps).
pub fn needed(writes_status: bool) -> &'static [(&'static str, &'static str)] {
    if writes_status {
        &NEEDED
    } else {
        &NEEDED[..3]
    }
}

/// The first right of [`needed`] that `client` (acting as the flow's ServiceAccount) lacks on
/// `ar` in `ns` (all namespaces when `None`), as a sentence naming it; `None` when it has all.
pub async fn missing_right(
    client: &Client,
    who: &str,
    ar: &ApiResource,
    ns: Option<&str>,
    writes_status: bool,
) -> Result<Option<String>, kube::Error> {
    let needs = needed(writes_status);
    let missing = first_missing(client, ar, ns, needs).await?;
    Ok(missing.map(|right| missing_message(who, right, ar, ns, needs)))
}

/// The rights a bound flow's ServiceAccount needs on each related kind (`bind.related`) to
/// watch it; `get` is asked per object, by name (it may be granted for some names only).
pub const RELATED_NEEDED: [(&str, &str); 2] = [("list", ""), ("watch", "")];

/// The first right of [`RELATED_NEEDED`] `client` lacks on the related kind `ar` in `ns` (all
/// namespaces when `None`), as a sentence naming it.
pub async fn missing_related_right(
    client: &Client,
    who: &str,
    ar: &ApiResource,
    ns: Option<&str>,
) -> Result<Option<String>, kube::Error> {
    let missing = first_missing(client, ar, ns, &RELATED_NEEDED).await?;
    Ok(missing.map(|(verb, _)| related_message(who, verb, ar, ns)))
}

/// The first of `needs` that `client` may not do on `ar` in `ns`, asked with
/// SelfSubjectAccessReviews.
async fn first_missing(
    client: &Client,
    ar: &ApiResource,
    ns: Option<&str>,
    needs: &[(&'static str, &'static str)],
) -> Result<Option<(&'static str, &'static str)>, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for &(verb, sub) in needs {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(ar.group.clone()),
                    resource: Some(ar.plural.clone()),
                    subresource: (!sub.is_empty()).then(|| sub.to_string()),
                    verb: Some(verb.to_string()),
                    namespace: ns.map(str::to_string),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api.create(&PostParams::default(), &review).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            return Ok(Some((verb, sub)));
        }
    }
    Ok(None)
}

/// "ServiceAccount ops/sync may not watch secrets in namespace ops; ... related objects ...".
pub fn related_message(who: &str, verb: &str, ar: &ApiResource, ns: Option<&str>) -> String {
    format!(
        "ServiceAccount {who} may not {verb} {} {}; a bound flow reads and watches its related \
         objects (bind.related) with its ServiceAccount's rights: grant list and watch on the kind, get on the objects named",
        resource_name(ar),
        place(ns)
    )
}

fn resource_name(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

fn place(ns: Option<&str>) -> String {
    match ns {
        Some(ns) => format!("in namespace {ns}"),
        None => "cluster-wide (allNamespaces)".into(),
    }
}

/// "ServiceAccount ops/db may not watch databases.example.com in namespace ops ...".
pub fn missing_message(
    who: &str,
    (verb, sub): (&str, &str),
    ar: &ApiResource,
    ns: Option<&str>,
    needed: &[(&str, &str)],
) -> String {
    let resource = resource_name(ar);
    let resource = if sub.is_empty() {
        resource
    } else {
        format!("{resource}/{sub}")
    };
    let place = place(ns);
    format!(
        "ServiceAccount {who} may not {verb} {resource} {place}; a bound flow watches, lists and \
         patches (finalizers, status) its objects with its ServiceAccount's rights: grant {}",
        needed
            .iter()
            .map(|(v, s)| if s.is_empty() {
                v.to_string()
            } else {
                format!("{v} {s}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_verb_the_resource_and_the_place() {
        let ar = ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "Database".into(),
            plural: "databases".into(),
        };
        let m = missing_message("ops/db", ("watch", ""), &ar, Some("ops"), &NEEDED);
        assert!(
            m.starts_with(
                "ServiceAccount ops/db may not watch databases.example.com in namespace ops"
            ),
            "{m}"
        );
        let m = missing_message("ops/db", ("patch", "status"), &ar, None, needed(true));
        assert!(
            m.contains("patch databases.example.com/status cluster-wide"),
            "{m}"
        );
        assert_eq!(
            crate::flow::accounts::service_account_user("a", "b"),
            "system:serviceaccount:a:b"
        );
        let secrets = ApiResource {
            group: "".into(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Secret".into(),
            plural: "secrets".into(),
        };
        let m = related_message("ops/sync", "watch", &secrets, Some("ops"));
        assert!(
            m.starts_with("ServiceAccount ops/sync may not watch secrets in namespace ops; ")
                && m.contains("related objects (bind.related)")
                && m.ends_with("grant list and watch on the kind, get on the objects named"),
            "{m}"
        );
    }
}
