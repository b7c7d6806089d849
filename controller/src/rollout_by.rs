//! Who asked for a rollout action (issue #44 item 4): `ops.example.com/rollout-by`, written by
//! the mutating webhook when a request sets or changes `ops.example.com/rollout` (what `kubectl
//! pf rollout pause|resume|promote|undo` sets), as it stamps approval decisions
//! ([`crate::approval`]) and stops ([`crate::stopped_by`]). Unlike a stop, an action needs a
//! right of its own: the user must be allowed the custom verb [`VERB`] (`rollout`) on
//! `pseudoflows` in the namespace, which edit rights do not include (a SubjectAccessReview, as
//! for `approve`); otherwise the request is refused, naming the verb. The stamp records the
//! action, the revision being rolled out as the request found it (`status.bound.rollout.revision`
//! of the object as admitted, "" if none), the user and groups the API server authenticated, the
//! time, and an HMAC under the approval key derived for rollouts, so that neither a client nor
//! another stamp passes for it. The controller accepts an action only with a stamp for the
//! revision rolling out ([`crate::bind::rollout::control`]).

use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::DynamicObject;
use pseudoflow_crd::rollout::{RolloutAction, ROLLOUT_ANNOTATION, ROLLOUT_BY_ANNOTATION};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::approval::{sign_in, verify_in, Key};
use crate::webhook::approval::{annotation, may, refusal};

/// The verb a user needs on `pseudoflows` to pause, resume, promote or undo a rollout.
pub const VERB: &str = "rollout";

/// Who asked for which action on which revision's rollout, as the webhook saw the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutStamp {
    /// The action (the annotation's value).
    pub action: RolloutAction,
    /// The revision being rolled out when the request was admitted ("" if none).
    pub revision: String,
    /// The user the API server authenticated.
    pub user: String,
    /// Their groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// When the webhook admitted it (unix milliseconds; shown, never compared).
    pub time: i64,
}

/// The domain rollout stamps are signed in (and their key derived for): no approval or stop
/// stamp passes for one.
const DOMAIN: &str = "rollout";

impl RolloutStamp {
    /// The annotation value: the stamp with its HMAC for flow `namespace/name`.
    pub fn sign(&self, key: &Key, namespace: &str, name: &str) -> String {
        sign_in(key, DOMAIN, (namespace, name), self)
    }

    /// The stamp in `value` if its HMAC is valid for flow `namespace/name`.
    pub fn verify(key: &Key, namespace: &str, name: &str, value: &str) -> Option<RolloutStamp> {
        verify_in(key, DOMAIN, (namespace, name), value)
    }
}

/// The action `req` asks for (None: it sets or changes no `ops.example.com/rollout`), or why it
/// is refused: a value that names no action, or a stamp written by the client itself. Removing
/// the annotation or the stamp asks for nothing and needs no right.
pub fn asked(req: &AdmissionRequest<DynamicObject>) -> Result<Option<RolloutAction>, String> {
    if !matches!(req.operation, Operation::Create | Operation::Update) || req.sub_resource.is_some()
    {
        return Ok(None);
    }
    let (obj, old) = (req.object.as_ref(), req.old_object.as_ref());
    let old = old.filter(|_| req.operation == Operation::Update);
    let value = annotation(obj, ROLLOUT_ANNOTATION);
    if value.is_some() && value != annotation(old, ROLLOUT_ANNOTATION) {
        let value = value.map(String::as_str).unwrap_or_default();
        return RolloutAction::parse(value).map(Some).ok_or_else(|| {
            format!(
                "{ROLLOUT_ANNOTATION}={value:?} names no rollout action: use pause, resume, \
                 promote or undo (kubectl pf rollout)"
            )
        });
    }
    let stamp = annotation(obj, ROLLOUT_BY_ANNOTATION);
    if stamp.is_some() && stamp != annotation(old, ROLLOUT_BY_ANNOTATION) {
        return Err(format!(
            "{ROLLOUT_BY_ANNOTATION} is written by the admission webhook only, when a user who \
             may \"{VERB}\" pseudoflows sets {ROLLOUT_ANNOTATION}; remove it from the request"
        ));
    }
    Ok(None)
}

/// The JSON Patch operations stamping `action`, which `req` asks for, at `now` (unix
/// milliseconds), replacing any stamp the client sent; or why it cannot be stamped (no key, no
/// user): then the request is refused, since the controller accepts no unstamped action.
pub fn stamp_ops(
    req: &AdmissionRequest<DynamicObject>,
    action: RolloutAction,
    key: Option<&Key>,
    now: i64,
) -> Result<Vec<Value>, String> {
    let key = key.ok_or(
        "the webhook has no approval key: cannot record the rollout action (it stamps only \
         when the API server authenticates to it, --webhook-client-ca; docs/operations.md)",
    )?;
    let user = req
        .user_info
        .username
        .clone()
        .ok_or("the request has no user: cannot record the rollout action")?;
    let revision = req
        .old_object
        .as_ref()
        .filter(|_| req.operation == Operation::Update)
        .and_then(|o| o.data.pointer("/status/bound/rollout/revision"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let stamp = RolloutStamp {
        action,
        revision: revision.to_string(),
        user,
        groups: req.user_info.groups.clone().unwrap_or_default(),
        time: now,
    };
    let obj = req.object.as_ref().ok_or("no object in the request")?;
    let name = obj.metadata.name.as_deref().unwrap_or(req.name.as_str());
    let namespace = req.namespace.as_deref().unwrap_or_default();
    Ok(vec![json!({
        "op": "add",
        "path": format!("/metadata/annotations/{}", ROLLOUT_BY_ANNOTATION.replace('~', "~0").replace('/', "~1")),
        "value": stamp.sign(key, namespace, name),
    })])
}

/// Refuses (with the reason) `req`, which asks for `action`, unless its user may [`VERB`]
/// pseudoflows in the namespace; a failed review refuses too.
pub async fn authorize(
    client: &kube::Client,
    req: &AdmissionRequest<DynamicObject>,
    action: RolloutAction,
) -> Result<(), String> {
    if may(client, req, VERB).await? {
        return Ok(());
    }
    Err(refused(req, action))
}

/// Why the user of `req` may not ask for `action`: the approval refusal's text, for this verb.
fn refused(req: &AdmissionRequest<DynamicObject>, action: RolloutAction) -> String {
    let what = format!("{} the rollout", action.as_str());
    refusal(req, &what, ROLLOUT_ANNOTATION, VERB, "roll out")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: &str, ann: Value, old_ann: Option<Value>) -> AdmissionRequest<DynamicObject> {
        let obj = |a: Value| {
            json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "f", "namespace": "ns", "annotations": a},
            "status": {"bound": {"objects": 2, "creating": 0, "running": 2, "failed": 0,
                "rollout": {"revision": "f-2", "phase": "Progressing", "wave": 1, "waves": 2,
                    "target": 1, "updated": 0}}}})
        };
        let user = json!({"username": "alice", "groups": ["ops"]});
        crate::webhook::testing::request(op, None, user, obj(ann), old_ann.map(obj))
    }

    #[test]
    fn an_action_is_stamped_with_the_revision_as_admitted_the_user_and_only_this_key() {
        let key = Key::random();
        let r = req(
            "UPDATE",
            json!({ROLLOUT_ANNOTATION: "promote"}),
            Some(json!({})),
        );
        let action = asked(&r).unwrap().unwrap();
        assert_eq!(action, RolloutAction::Promote);
        let ops = stamp_ops(&r, action, Some(&key), 7).unwrap();
        assert_eq!(
            ops[0]["path"],
            "/metadata/annotations/ops.example.com~1rollout-by"
        );
        let value = ops[0]["value"].as_str().unwrap();
        let stamp = RolloutStamp::verify(&key, "ns", "f", value).unwrap();
        assert_eq!(
            stamp,
            RolloutStamp {
                action: RolloutAction::Promote,
                revision: "f-2".into(),
                user: "alice".into(),
                groups: vec!["ops".into()],
                time: 7,
            }
        );
        assert!(RolloutStamp::verify(&key, "ns", "g", value).is_none());
        assert!(RolloutStamp::verify(&Key::random(), "ns", "f", value).is_none());
        // A stop stamp, signed with the same key, is no rollout stamp.
        let stop = crate::stopped_by::StopStamp {
            run: "f-2".into(),
            user: "alice".into(),
            groups: vec![],
            time: 7,
        };
        assert!(RolloutStamp::verify(&key, "ns", "f", &stop.sign(&key, "ns", "f")).is_none());
    }

    /// Word for word what the refusal said before it shared the approval refusal's builder.
    #[test]
    fn a_refusal_names_the_action_the_verb_and_the_namespace() {
        let r = req(
            "UPDATE",
            json!({ROLLOUT_ANNOTATION: "promote"}),
            Some(json!({})),
        );
        assert_eq!(
            refused(&r, RolloutAction::Promote),
            "alice may not promote the rollout of PseudoFlow \"f\": setting \
             ops.example.com/rollout needs the \"rollout\" verb on pseudoflows.ops.example.com \
             in namespace \"ns\" (edit rights do not roll out)"
        );
    }

    #[test]
    fn a_create_carrying_an_action_stamps_no_revision() {
        let r = req("CREATE", json!({ROLLOUT_ANNOTATION: "undo"}), None);
        assert_eq!(asked(&r), Ok(Some(RolloutAction::Undo)));
        let key = Key::random();
        let ops = stamp_ops(&r, RolloutAction::Undo, Some(&key), 1).unwrap();
        let stamp = RolloutStamp::verify(&key, "ns", "f", ops[0]["value"].as_str().unwrap());
        assert_eq!(stamp.unwrap().revision, "");
    }

    #[test]
    fn a_stamp_written_by_a_client_is_refused_and_keeping_or_removing_asks_nothing() {
        let forged = json!({ROLLOUT_BY_ANNOTATION: "{}"});
        let e = asked(&req("UPDATE", forged, Some(json!({})))).unwrap_err();
        assert!(e.contains("written by the admission webhook only"), "{e}");
        let e = asked(&req("CREATE", json!({ROLLOUT_BY_ANNOTATION: "{}"}), None)).unwrap_err();
        assert!(e.contains("written by the admission webhook only"), "{e}");
        let kept = json!({ROLLOUT_ANNOTATION: "pause", ROLLOUT_BY_ANNOTATION: "{}"});
        assert_eq!(
            asked(&req("UPDATE", kept.clone(), Some(kept.clone()))),
            Ok(None)
        );
        assert_eq!(asked(&req("UPDATE", json!({}), Some(kept))), Ok(None));
        // Sent with an action, the client's stamp is replaced by the webhook's.
        let both = json!({ROLLOUT_ANNOTATION: "pause", ROLLOUT_BY_ANNOTATION: "{}"});
        let r = req("UPDATE", both, Some(json!({})));
        assert_eq!(asked(&r), Ok(Some(RolloutAction::Pause)));
    }

    #[test]
    fn a_value_naming_no_action_is_refused_and_no_key_stamps_nothing() {
        let r = req(
            "UPDATE",
            json!({ROLLOUT_ANNOTATION: "Pause"}),
            Some(json!({})),
        );
        let e = asked(&r).unwrap_err();
        assert!(e.contains("names no rollout action"), "{e}");
        let r = req(
            "UPDATE",
            json!({ROLLOUT_ANNOTATION: "pause"}),
            Some(json!({})),
        );
        let e = stamp_ops(&r, RolloutAction::Pause, None, 1).unwrap_err();
        assert!(e.contains("no approval key"), "{e}");
        let status = req(
            "UPDATE",
            json!({ROLLOUT_ANNOTATION: "pause"}),
            Some(json!({})),
        );
        let mut status = status;
        status.sub_resource = Some("status".into());
        assert_eq!(asked(&status), Ok(None));
    }

    /// A stamp signed by a controller before the stamps shared one helper
    /// (`crate::approval::sign_in`): it must verify, and signing it again give the same bytes.
    #[test]
    fn a_rollout_stamp_signed_before_still_verifies_byte_for_byte() {
        let key = Key::new("k".repeat(32)).unwrap();
        let stamp = RolloutStamp {
            action: RolloutAction::Undo,
            revision: "f-2".into(),
            user: "alice".into(),
            groups: vec!["ops".into()],
            time: 7,
        };
        assert_eq!(stamp.sign(&key, "ns", "f"), PINNED);
        assert_eq!(RolloutStamp::verify(&key, "ns", "f", PINNED), Some(stamp));
    }

    /// Computed with the code before the shared helper.
    const PINNED: &str = r#"{"action":"undo","revision":"f-2","user":"alice","groups":["ops"],"time":7,"mac":"645064f72d075b35ac8bfee0e88c0ce5e848271e0806a55eb7ec9d5792b382a0"}"#;
}
