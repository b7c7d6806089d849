//! Who stopped a run (issue #43 item 4): `ops.example.com/stopped-by`, written by the mutating
//! webhook when a request sets or changes `ops.example.com/stop` (what `kubectl pf stop` sets),
//! as it stamps approval decisions ([`crate::approval`]): the run the stop names, the user and
//! groups the API server authenticated, the time, and an HMAC under the approval key derived
//! for stops, so that neither a client nor an approval stamp can pass for it. The controller
//! names that user in the stopped run's status and its `RunAborted` Event. Stopping needs only
//! the right to edit the flow (as `kubectl pf stop` documents); without the webhook, or for a
//! caller the webhook cannot authenticate as the API server, the stop still stops, told as by a
//! user nobody recorded.

use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::DynamicObject;
use pseudoflow_crd::STOP_ANNOTATION;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::approval::{sign_in, verify_in, Key};
use crate::webhook::approval::annotation;

/// The annotation recording who asked for the stop.
pub const STOPPED_BY: &str = "ops.example.com/stopped-by";

/// Who stopped which run, as the webhook saw the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopStamp {
    /// The run the stop names (the annotation's value).
    pub run: String,
    /// The user the API server authenticated.
    pub user: String,
    /// Their groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// When the webhook admitted it (unix milliseconds; shown, never compared).
    pub time: i64,
}

/// The domain stop stamps are signed in (and their key derived for): no approval stamp or seal
/// passes for one.
const DOMAIN: &str = "stop";

impl StopStamp {
    /// The annotation value: the stamp with its HMAC for flow `namespace/name`.
    pub fn sign(&self, key: &Key, namespace: &str, name: &str) -> String {
        sign_in(key, DOMAIN, (namespace, name), self)
    }

    /// The stamp in `value` if its HMAC is valid for flow `namespace/name`.
    pub fn verify(key: &Key, namespace: &str, name: &str, value: &str) -> Option<StopStamp> {
        verify_in(key, DOMAIN, (namespace, name), value)
    }
}

/// The JSON Patch operations stamping the stop `req` asks for at `now` (none: it asks for none,
/// or there is no key to sign with), or why it is refused: it writes the stamp itself.
pub fn stamp_ops(
    req: &AdmissionRequest<DynamicObject>,
    key: Option<&Key>,
    now: i64,
) -> Result<Vec<Value>, String> {
    if !matches!(req.operation, Operation::Create | Operation::Update) || req.sub_resource.is_some()
    {
        return Ok(Vec::new());
    }
    let (obj, old) = (req.object.as_ref(), req.old_object.as_ref());
    let stop = annotation(obj, STOP_ANNOTATION);
    let asks = stop.is_some() && stop != annotation(old, STOP_ANNOTATION);
    let stamp = annotation(obj, STOPPED_BY);
    if !asks {
        if stamp.is_some() && stamp != annotation(old, STOPPED_BY) {
            return Err(format!(
                "{STOPPED_BY} is written by the admission webhook only, when a request sets \
                 {STOP_ANNOTATION}; remove it from the request"
            ));
        }
        return Ok(Vec::new());
    }
    let (Some(key), Some(user)) = (key, req.user_info.username.clone()) else {
        return Ok(Vec::new());
    };
    let stamp = StopStamp {
        run: stop.cloned().unwrap_or_default(),
        user,
        groups: req.user_info.groups.clone().unwrap_or_default(),
        time: now,
    };
    let name = obj.and_then(|o| o.metadata.name.as_deref());
    let name = name.unwrap_or(req.name.as_str());
    let namespace = req.namespace.as_deref().unwrap_or_default();
    Ok(vec![json!({
        "op": "add",
        "path": format!("/metadata/annotations/{}", STOPPED_BY.replace('/', "~1")),
        "value": stamp.sign(key, namespace, name),
    })])
}

/// Who stopped run `run` of flow `namespace/name`, as its stamp (verified) records.
pub fn who(
    key: Option<&Key>,
    annotations: &std::collections::BTreeMap<String, String>,
    (namespace, name, run): (&str, &str, &str),
) -> Option<StopStamp> {
    let value = annotations.get(STOPPED_BY)?;
    let stamp = StopStamp::verify(key?, namespace, name, value)?;
    (stamp.run == run).then_some(stamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn req(op: &str, ann: Value, old_ann: Option<Value>) -> AdmissionRequest<DynamicObject> {
        let obj = |a: Value| {
            json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "f", "namespace": "ns", "annotations": a}})
        };
        let user = json!({"username": "alice", "groups": ["ops"]});
        crate::webhook::testing::request(op, None, user, obj(ann), old_ann.map(obj))
    }

    #[test]
    fn a_stop_is_stamped_with_its_run_and_user_and_only_this_key_verifies_it() {
        let key = Key::random();
        let r = req(
            "UPDATE",
            json!({"ops.example.com/stop": "r2"}),
            Some(json!({})),
        );
        let ops = stamp_ops(&r, Some(&key), 7).unwrap();
        let value = ops[0]["value"].as_str().unwrap();
        let mut ann = BTreeMap::new();
        ann.insert(STOPPED_BY.to_string(), value.to_string());
        let who_stopped = who(Some(&key), &ann, ("ns", "f", "r2")).unwrap();
        assert_eq!((who_stopped.user.as_str(), who_stopped.time), ("alice", 7));
        assert!(
            who(Some(&key), &ann, ("ns", "f", "r1")).is_none(),
            "another run"
        );
        assert!(
            who(Some(&key), &ann, ("ns", "g", "r2")).is_none(),
            "another flow"
        );
        assert!(who(Some(&Key::random()), &ann, ("ns", "f", "r2")).is_none());
        let approval = crate::approval::Stamp {
            decision: crate::approval::Decision::Approve,
            step: "r2".into(),
            user: "mallory".into(),
            groups: vec![],
            time: 7,
            run: "r2".into(),
        };
        ann.insert(STOPPED_BY.to_string(), approval.sign(&key, "ns", "f"));
        assert!(
            who(Some(&key), &ann, ("ns", "f", "r2")).is_none(),
            "an approval stamp"
        );
    }

    #[test]
    fn a_stamp_written_by_a_client_is_refused_and_no_stop_or_no_key_stamps_nothing() {
        let key = Key::random();
        let forged = json!({"ops.example.com/stopped-by": "{}"});
        let e = stamp_ops(&req("UPDATE", forged, Some(json!({}))), Some(&key), 1).unwrap_err();
        assert!(e.contains("written by the admission webhook only"), "{e}");
        let kept = json!({"ops.example.com/stop": "r1", "ops.example.com/stopped-by": "{}"});
        let same = stamp_ops(&req("UPDATE", kept.clone(), Some(kept)), Some(&key), 1);
        assert_eq!(same.unwrap(), Vec::<Value>::new(), "nothing changed");
        let stop = json!({"ops.example.com/stop": "r1"});
        let none = stamp_ops(&req("UPDATE", stop, Some(json!({}))), None, 1);
        assert_eq!(
            none.unwrap(),
            Vec::<Value>::new(),
            "no key: the stop goes unstamped"
        );
    }

    /// A stamp signed by a controller before the stamps shared one helper
    /// (`crate::approval::sign_in`): it must verify, and signing it again give the same bytes.
    #[test]
    fn a_stop_stamp_signed_before_still_verifies_byte_for_byte() {
        let key = Key::new("k".repeat(32)).unwrap();
        let stamp = StopStamp {
            run: "r2".into(),
            user: "alice".into(),
            groups: vec!["ops".into()],
            time: 7,
        };
        assert_eq!(stamp.sign(&key, "ns", "f"), PINNED);
        assert_eq!(StopStamp::verify(&key, "ns", "f", PINNED), Some(stamp));
    }

    /// Computed with the code before the shared helper.
    const PINNED: &str = r#"{"run":"r2","user":"alice","groups":["ops"],"time":7,"mac":"be60e7f8b53aec6b36a2c860328b796638a62df805eebdbde1973e3c9737f7b3"}"#;
}
