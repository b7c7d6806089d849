//! The mutating admission webhook (`POST /mutate`): records who made an approval decision so
//! that nobody can forge it (see [`crate::approval`]). A request that sets or changes
//! `ops.example.com/approve` or `ops.example.com/reject` — from a user who may `approve`
//! pseudoflows there (the same SubjectAccessReview as the validating webhook) — gets the
//! annotation [`APPROVED_BY`] written by this webhook: the decision, the step, the user and
//! groups the API server authenticated, the time, the run status showed, and its HMAC. A
//! request that writes that annotation itself, without a decision, is refused; removing it is
//! allowed (it only withdraws a decision, as removing the approve annotation does). It stamps
//! stops ([`crate::stopped_by`]) and rollout actions ([`crate::rollout_by`]) the same way.

use axum::extract::State;
use axum::Json;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use pseudoflow_crd::APPROVE_ANNOTATION;
use serde_json::{json, Value};

use super::approval::{annotation, decisions};
use crate::approval::{Decision, Key, Stamp, APPROVED_BY};

/// `POST /mutate`: an AdmissionReview in, the same with its response (and patch) out. 404 when
/// the server runs without the webhook.
pub async fn handle(
    State(super::Admission(webhook)): State<super::Admission>,
    caller: Option<axum::Extension<super::Caller>>,
    body: axum::body::Bytes,
) -> Result<Json<AdmissionReview<DynamicObject>>, axum::http::StatusCode> {
    let Some(webhook) = webhook else {
        return Err(axum::http::StatusCode::NOT_FOUND);
    };
    let hook = &*webhook;
    let caller = caller.map(|c| c.0);
    let review = hook
        .answer_review(&body, |req| async move { answer(hook, &req, caller).await })
        .await;
    Ok(Json(review))
}

/// The answer to one request: its approval decision, stop and rollout action stamped (each
/// after its own checks), or the first refusal.
async fn answer(
    webhook: &super::Webhook,
    req: &AdmissionRequest<DynamicObject>,
    caller: Option<super::Caller>,
) -> AdmissionResponse {
    let allow = AdmissionResponse::from(req);
    let now = crate::approval::now_ms();
    let trusted = webhook.may_ask_about_approvals(caller);
    // Who stops a run is recorded only as the API server tells it (a stop needs no right
    // beyond editing the flow: an unstamped stop still stops).
    let key = webhook.key.as_ref().filter(|_| trusted.is_ok());
    let stamped = (
        stamp_patch(req, webhook.key.as_ref(), now),
        crate::stopped_by::stamp_ops(req, key, now),
        crate::rollout_by::asked(req),
    );
    let (approval, mut ops, rollout) = match stamped {
        (Err(refusal), _, _) | (_, Err(refusal), _) | (_, _, Err(refusal)) => {
            return allow.deny(refusal)
        }
        (Ok(approval), Ok(stop), Ok(rollout)) => (approval, stop, rollout),
    };
    if approval.is_some() || rollout.is_some() {
        if let Err(refusal) = trusted {
            return allow.deny(refusal);
        }
    }
    if let Some(patch) = approval {
        if let Err(refusal) = super::approval::authorize(&webhook.client, req).await {
            return allow.deny(refusal);
        }
        let mut first = patch.as_array().cloned().unwrap_or_default();
        first.append(&mut ops);
        ops = first;
    }
    if let Some(action) = rollout {
        if let Err(refusal) = crate::rollout_by::authorize(&webhook.client, req, action).await {
            return allow.deny(refusal);
        }
        match crate::rollout_by::stamp_ops(req, action, webhook.key.as_ref(), now) {
            Ok(stamp) => ops.extend(stamp),
            Err(refusal) => return allow.deny(refusal),
        }
    }
    if ops.is_empty() {
        allow
    } else {
        with_patch(allow, Value::Array(ops))
    }
}

fn with_patch(allow: AdmissionResponse, patch: Value) -> AdmissionResponse {
    let parsed: Result<json_patch::Patch, _> = serde_json::from_value(patch);
    match parsed.map(|p| allow.clone().with_patch(p)) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => allow.deny(format!("cannot record the approval: {e}")),
        Err(e) => allow.deny(format!("cannot record the approval: {e}")),
    }
}

/// The JSON Patch stamping the decision `req` makes at `now` (unix milliseconds; None: it makes
/// none), or why it is refused: it writes the stamp itself, makes two decisions at once, or cannot be stamped.
pub fn stamp_patch(
    req: &AdmissionRequest<DynamicObject>,
    key: Option<&Key>,
    now: i64,
) -> Result<Option<Value>, String> {
    if !matches!(req.operation, Operation::Create | Operation::Update) || req.sub_resource.is_some()
    {
        return Ok(None);
    }
    let decided = decisions(req);
    let new = annotation(req.object.as_ref(), APPROVED_BY);
    let old = annotation(req.old_object.as_ref(), APPROVED_BY);
    let (annotation_key, step) = match decided.as_slice() {
        [] if new.is_some() && new != old => {
            return Err(format!(
                "{APPROVED_BY} is written by the admission webhook only, when a user who may \
                 approve sets ops.example.com/approve or ops.example.com/reject; remove it from \
                 the request"
            ))
        }
        [] => return Ok(None),
        [one] => one.clone(),
        _ => {
            return Err(
                "set ops.example.com/approve or ops.example.com/reject in a request, not both"
                    .into(),
            )
        }
    };
    let key = key.ok_or(
        "the webhook has no approval key: cannot record the decision (it stamps approvals only \
         when the API server authenticates to it, --webhook-client-ca; docs/operations.md)",
    )?;
    let user = req
        .user_info
        .username
        .clone()
        .ok_or("the request has no user: cannot record the decision")?;
    let run = req
        .old_object
        .as_ref()
        .and_then(|o| o.data.pointer("/status/run/id"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let stamp = Stamp {
        decision: if annotation_key == APPROVE_ANNOTATION {
            Decision::Approve
        } else {
            Decision::Reject
        },
        step,
        user,
        groups: req.user_info.groups.clone().unwrap_or_default(),
        time: now,
        run: run.to_string(),
    };
    let obj = req.object.as_ref().ok_or("no object in the request")?;
    let name = obj.metadata.name.as_deref().unwrap_or(req.name.as_str());
    let namespace = req.namespace.as_deref().unwrap_or_default();
    let value = stamp.sign(key, namespace, name);
    Ok(Some(json!([{
        "op": "add",
        "path": format!("/metadata/annotations/{}", APPROVED_BY.replace('~', "~0").replace('/', "~1")),
        "value": value,
    }])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pseudoflow_crd::REJECT_ANNOTATION;

    fn req(op: &str, ann: Value, old_ann: Option<Value>) -> AdmissionRequest<DynamicObject> {
        let obj = |a: Value| {
            json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "f", "namespace": "team", "annotations": a}, "spec": {},
            "status": {"run": {"id": "r1", "generation": 1}}})
        };
        let user = json!({"username": "boss", "groups": ["ops", "system:authenticated"]});
        crate::webhook::testing::request(op, None, user, obj(ann), old_ann.map(obj))
    }

    fn stamped(patch: &Value) -> String {
        assert_eq!(
            patch[0]["path"],
            "/metadata/annotations/ops.example.com~1approved-by"
        );
        patch[0]["value"].as_str().unwrap().to_string()
    }

    #[test]
    fn a_decision_is_stamped_with_the_user_groups_time_and_run() {
        let key = Key::random();
        let r = req(
            "UPDATE",
            json!({APPROVE_ANNOTATION: "gate"}),
            Some(json!({})),
        );
        let patch = stamp_patch(&r, Some(&key), 1000).unwrap().unwrap();
        let stamp = Stamp::verify(&key, "team", "f", &stamped(&patch)).unwrap();
        assert_eq!(
            stamp,
            Stamp {
                decision: Decision::Approve,
                step: "gate".into(),
                user: "boss".into(),
                groups: vec!["ops".into(), "system:authenticated".into()],
                time: 1000,
                run: "r1".into(),
            }
        );
        // A client's own stamp sent with the decision is replaced.
        let r = req(
            "UPDATE",
            json!({REJECT_ANNOTATION: "gate", APPROVED_BY: "{\"forged\":1}"}),
            Some(json!({})),
        );
        let patch = stamp_patch(&r, Some(&key), 1000).unwrap().unwrap();
        let stamp = Stamp::verify(&key, "team", "f", &stamped(&patch)).unwrap();
        assert_eq!(stamp.decision, Decision::Reject);
    }

    #[test]
    fn a_stamp_written_by_a_client_is_refused_and_removing_it_is_not() {
        let key = Key::random();
        for (new, old) in [
            (
                json!({APPROVE_ANNOTATION: "gate", APPROVED_BY: "x"}),
                json!({APPROVE_ANNOTATION: "gate"}),
            ),
            (json!({APPROVED_BY: "y"}), json!({APPROVED_BY: "x"})),
        ] {
            let r = req("UPDATE", new, Some(old));
            let err = stamp_patch(&r, Some(&key), 1).unwrap_err();
            assert!(
                err.contains("written by the admission webhook only"),
                "{err}"
            );
        }
        let r = req("CREATE", json!({APPROVED_BY: "x"}), None);
        assert!(stamp_patch(&r, Some(&key), 1).is_err());
        let removed = req(
            "UPDATE",
            json!({APPROVE_ANNOTATION: "gate"}),
            Some(json!({APPROVE_ANNOTATION: "gate", APPROVED_BY: "x"})),
        );
        assert_eq!(stamp_patch(&removed, Some(&key), 1), Ok(None));
        let unchanged = req(
            "UPDATE",
            json!({APPROVE_ANNOTATION: "gate", APPROVED_BY: "x", "team": "a"}),
            Some(json!({APPROVE_ANNOTATION: "gate", APPROVED_BY: "x"})),
        );
        assert_eq!(stamp_patch(&unchanged, Some(&key), 1), Ok(None));
    }

    #[test]
    fn two_decisions_at_once_or_no_key_are_refused() {
        let both = req(
            "UPDATE",
            json!({APPROVE_ANNOTATION: "gate", REJECT_ANNOTATION: "gate"}),
            Some(json!({})),
        );
        assert!(stamp_patch(&both, Some(&Key::random()), 1).is_err());
        let one = req(
            "UPDATE",
            json!({APPROVE_ANNOTATION: "gate"}),
            Some(json!({})),
        );
        assert!(stamp_patch(&one, None, 1)
            .unwrap_err()
            .contains("no approval key"));
    }
}
