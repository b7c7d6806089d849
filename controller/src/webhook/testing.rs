//! What the admission rules' unit tests share (the validating webhook's, the stamps', stops'
//! and rollout actions'): a request for a PseudoFlow as the API server sends it in an
//! AdmissionReview, so that each test states only the objects and the user that matter to it.

use kube::core::admission::{AdmissionRequest, AdmissionReview};
use kube::core::DynamicObject;
use serde_json::{json, Value};

/// The request (uid `u-1`) of `operation` on `sub` (a subresource, if any) by `user` (the
/// review's `userInfo`), carrying `object` and `old`; its name and namespace are the object's.
pub(crate) fn request(
    operation: &str,
    sub: Option<&str>,
    user: Value,
    object: Value,
    old: Option<Value>,
) -> AdmissionRequest<DynamicObject> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "ops.example.com", "version": "v1alpha1", "kind": "PseudoFlow"},
            "resource": {"group": "ops.example.com", "version": "v1alpha1", "resource": "pseudoflows"},
            "subResource": sub,
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": operation,
            "userInfo": user,
            "object": object,
            "oldObject": old,
            "dryRun": false,
        }
    }))
    .unwrap();
    review.try_into().unwrap()
}
