//! Who may approve: setting `ops.example.com/approve` or `ops.example.com/reject` on a
//! PseudoFlow — on an update, or already on a create (a flow must not arrive pre-approved by
//! someone who may not approve) — is refused unless the requesting user may `approve`
//! `pseudoflows` in that namespace, as the API server's own authorizer answers a
//! SubjectAccessReview for the user, groups and extra the API server put in the request (a
//! client cannot forge them). `approve` is a verb of its own: edit rights alone do not approve.
//! Removing the annotation needs no right: it withdraws a decision, it does not make one.

use std::collections::BTreeMap;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::DynamicObject;
use pseudoflow_crd::{APPROVE_ANNOTATION, REJECT_ANNOTATION};

/// The verb a user needs on `pseudoflows` to approve or reject.
pub const VERB: &str = "approve";

fn annotations(o: Option<&DynamicObject>) -> BTreeMap<String, String> {
    o.and_then(|o| o.metadata.annotations.clone())
        .unwrap_or_default()
}

/// Annotation `key` of `o` (a request's object or old object), if any: what each webhook rule
/// compares between the two to tell what a request sets (stamps, stops, rollout actions).
pub(crate) fn annotation<'a>(o: Option<&'a DynamicObject>, key: &str) -> Option<&'a String> {
    o?.metadata.annotations.as_ref()?.get(key)
}

/// The user of `req` as a refusal names them.
fn user_name(req: &AdmissionRequest<DynamicObject>) -> &str {
    req.user_info
        .username
        .as_deref()
        .unwrap_or("(unknown user)")
}

/// Why the user of `req` may not `what` (`approve step "gate"`, `pause the rollout`) of the
/// flow: setting `annotation` needs `verb` in its namespace, which edit rights do not include
/// (they do not `what_edit_does_not`). One text for every custom verb [`may`] checks, so that a
/// refusal reads the same whichever annotation a user set.
pub(crate) fn refusal(
    req: &AdmissionRequest<DynamicObject>,
    what: &str,
    annotation: &str,
    verb: &str,
    what_edit_does_not: &str,
) -> String {
    let who = user_name(req);
    let namespace = req.namespace.as_deref().unwrap_or_default();
    format!(
        "{who} may not {what} of PseudoFlow {:?}: setting {annotation} needs the \"{verb}\" \
         verb on pseudoflows.ops.example.com in namespace {namespace:?} (edit rights do not \
         {what_edit_does_not})",
        req.name
    )
}

/// The approval annotations this request sets or changes (key, new value).
pub fn decisions(req: &AdmissionRequest<DynamicObject>) -> Vec<(&'static str, String)> {
    if !matches!(req.operation, Operation::Create | Operation::Update) || req.sub_resource.is_some()
    {
        return Vec::new();
    }
    let new = annotations(req.object.as_ref());
    let old = match req.operation {
        Operation::Update => annotations(req.old_object.as_ref()),
        _ => BTreeMap::new(),
    };
    [APPROVE_ANNOTATION, REJECT_ANNOTATION]
        .into_iter()
        .filter_map(|k| {
            let v = new.get(k)?;
            (old.get(k) != Some(v)).then(|| (k, v.clone()))
        })
        .collect()
}

/// Whether the user of `req` may `verb` pseudoflows (this one) in its namespace, as the API
/// server's own authorizer answers a SubjectAccessReview for the user, groups and extra the API
/// server put in the request; a review that fails is an error naming the verb.
pub async fn may(
    client: &kube::Client,
    req: &AdmissionRequest<DynamicObject>,
    verb: &str,
) -> Result<bool, String> {
    let user = &req.user_info;
    let namespace = req.namespace.clone().unwrap_or_default();
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("ops.example.com".into()),
                resource: Some("pseudoflows".into()),
                verb: Some(verb.into()),
                namespace: Some(namespace),
                name: Some(req.name.clone()).filter(|n| !n.is_empty()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let who = user_name(req);
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &sar)
        .await
        .map_err(|e| format!("cannot check whether {who} may {verb}: {e}"))?;
    Ok(answer.status.as_ref().is_some_and(|s| s.allowed))
}

/// Refuses (with the reason) a request making an approval decision unless its user may
/// `approve` pseudoflows in the namespace; a failed review refuses too.
pub async fn authorize(
    client: &kube::Client,
    req: &AdmissionRequest<DynamicObject>,
) -> Result<(), String> {
    let decisions = decisions(req);
    let Some((key, step)) = decisions.first() else {
        return Ok(());
    };
    if may(client, req, VERB).await? {
        return Ok(());
    }
    let action = if *key == APPROVE_ANNOTATION {
        "approve"
    } else {
        "reject"
    };
    let what = format!("{action} step {step:?}");
    Err(refusal(req, &what, key, VERB, "approve"))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn req(
        op: &str,
        ann: Value,
        old_ann: Option<Value>,
        sub: Option<&str>,
    ) -> AdmissionRequest<DynamicObject> {
        let obj = |a: Value| {
            json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "f", "namespace": "team", "annotations": a}, "spec": {}})
        };
        let user = json!({"username": "mallory"});
        crate::webhook::testing::request(op, sub, user, obj(ann), old_ann.map(obj))
    }

    #[test]
    fn a_create_already_carrying_an_approval_is_a_decision() {
        let r = req("CREATE", json!({APPROVE_ANNOTATION: "gate"}), None, None);
        assert_eq!(
            decisions(&r),
            vec![(APPROVE_ANNOTATION, "gate".to_string())]
        );
    }

    #[test]
    fn setting_or_changing_is_a_decision_keeping_or_removing_is_not() {
        let set = req(
            "UPDATE",
            json!({REJECT_ANNOTATION: "gate"}),
            Some(json!({})),
            None,
        );
        assert_eq!(
            decisions(&set),
            vec![(REJECT_ANNOTATION, "gate".to_string())]
        );
        let changed = req(
            "UPDATE",
            json!({APPROVE_ANNOTATION: "b"}),
            Some(json!({APPROVE_ANNOTATION: "a"})),
            None,
        );
        assert_eq!(
            decisions(&changed),
            vec![(APPROVE_ANNOTATION, "b".to_string())]
        );
        let kept = req(
            "UPDATE",
            json!({APPROVE_ANNOTATION: "a", "x": "1"}),
            Some(json!({APPROVE_ANNOTATION: "a"})),
            None,
        );
        assert!(decisions(&kept).is_empty());
        let removed = req(
            "UPDATE",
            json!({}),
            Some(json!({APPROVE_ANNOTATION: "a"})),
            None,
        );
        assert!(decisions(&removed).is_empty());
        let other = req(
            "UPDATE",
            json!({"ops.example.com/run": "2"}),
            Some(json!({})),
            None,
        );
        assert!(decisions(&other).is_empty());
    }

    /// The text tests and users read (controller/tests/admission greps it), the same for the
    /// approval verb and the rollout one (`crate::rollout_by::authorize`).
    #[test]
    fn a_refusal_names_the_user_the_flow_the_annotation_the_verb_and_the_namespace() {
        let r = req(
            "UPDATE",
            json!({APPROVE_ANNOTATION: "gate"}),
            Some(json!({})),
            None,
        );
        assert_eq!(
            refusal(
                &r,
                "approve step \"gate\"",
                APPROVE_ANNOTATION,
                VERB,
                "approve"
            ),
            "mallory may not approve step \"gate\" of PseudoFlow \"f\": setting \
             ops.example.com/approve needs the \"approve\" verb on pseudoflows.ops.example.com \
             in namespace \"team\" (edit rights do not approve)"
        );
        let mut anonymous = r;
        anonymous.user_info.username = None;
        let text = refusal(&anonymous, "pause the rollout", "a", "rollout", "roll out");
        assert!(
            text.starts_with("(unknown user) may not pause the rollout of PseudoFlow \"f\"")
                && text.ends_with("(edit rights do not roll out)"),
            "{text}"
        );
    }

    #[test]
    fn deletes_and_status_are_not_decisions() {
        assert!(decisions(&req(
            "DELETE",
            json!({APPROVE_ANNOTATION: "a"}),
            Some(json!({})),
            None
        ))
        .is_empty());
        assert!(decisions(&req(
            "UPDATE",
            json!({APPROVE_ANNOTATION: "a"}),
            Some(json!({})),
            Some("status")
        ))
        .is_empty());
    }
}
