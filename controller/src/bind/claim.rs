//! Whether a child flow is this bound flow's own for an object. A label and a controller owner
//! reference naming the bound flow can be written by anyone who may create a PseudoFlow in its
//! namespace, and the object's UID by anyone who may read the object; neither proves anything.
//! What does: the object itself names its child's UID (an annotation the bound flow writes,
//! with its finalizer, right after it created the child). A child's UID is given by the API
//! server when it is created, so only the flow that created it could have written it there; a
//! flow planted under a child's name is never named by the object, and is never adopted.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use pseudoflow_crd::bind::CHILD_MARK_PREFIX;
use serde_json::json;

/// The annotation on each object naming the UID of bound flow `parent`'s child for it:
/// `child.ops.example.com/flow-<parent>-<hash>` (the finalizer's name, under another prefix).
pub fn mark_key(ns: &str, parent: &str) -> String {
    let fin = super::object::finalizer_name(ns, parent);
    let name = fin.split_once('/').map(|(_, n)| n).unwrap_or(&fin);
    format!("{CHILD_MARK_PREFIX}{name}")
}

/// How a child flow found under an object's child name stands to that object.
#[derive(Debug, PartialEq)]
pub enum Standing {
    /// This flow made it for this object: it is served.
    Ours,
    /// Made by a controller before objects named their child (same owner, the object's UID
    /// recorded, the object already carries the flow's finalizer): adopted once, then marked.
    Legacy,
    /// Not this flow's for this object: why (it is not adopted, and reported).
    Foreign(String),
}

/// The UID `child` records of the object it serves (`spec.bound.object.metadata.uid`).
pub fn recorded_uid(child: &DynamicObject) -> Option<&str> {
    child.data["spec"]["bound"]["object"]["metadata"]["uid"].as_str()
}

/// Where a listed child whose spec cannot be read says why ([`super::pages::list_kept`]): it
/// records no object, and stands for none.
pub const UNREADABLE: &str = "unreadable";

/// How `child` (owned by the bound flow, by its owner reference) stands to `obj`, given the
/// bound flow's mark annotation and finalizer.
pub fn standing(child: &DynamicObject, obj: &DynamicObject, mark: &str, fin: &str) -> Standing {
    let name = child.metadata.name.as_deref().unwrap_or_default();
    if let Some(why) = child.data[UNREADABLE].as_str() {
        return Standing::Foreign(format!("the PseudoFlow {name} cannot be read: {why}"));
    }
    let obj_uid = obj.metadata.uid.as_deref().unwrap_or_default();
    let recorded = recorded_uid(child);
    if recorded != Some(obj_uid) {
        let other = recorded.unwrap_or("none");
        return Standing::Foreign(format!(
            "the PseudoFlow {name} records another object (uid {other}, this one's is \
             {obj_uid}); it is not adopted (delete it to have the object served)"
        ));
    }
    let annotations = obj.metadata.annotations.as_ref();
    let named = annotations.and_then(|a| a.get(mark));
    match named {
        Some(uid) if Some(uid.as_str()) == child.metadata.uid.as_deref() => Standing::Ours,
        None if has_finalizer(obj, fin) => Standing::Legacy,
        _ => Standing::Foreign(format!(
            "a PseudoFlow named {name} exists that this flow did not make for this object (the \
             object's annotation {mark} does not name it); it is not adopted (delete it to have \
             the object served)"
        )),
    }
}

fn has_finalizer(obj: &DynamicObject, fin: &str) -> bool {
    obj.metadata.finalizers.iter().flatten().any(|f| f == fin)
}

/// Puts the finalizer `fin` on the object and names its child `child_uid` in `mark`, in one
/// patch (nothing is written when both are there). The resourceVersion makes it fail (and the
/// reconcile retry) if the object changed meanwhile, so no other finalizer is lost.
pub async fn mark(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    fin: &str,
    mark: &str,
    child_uid: &str,
) -> kube::Result<()> {
    let annotations = obj.metadata.annotations.as_ref();
    let named = annotations.and_then(|a| a.get(mark)).map(String::as_str);
    if has_finalizer(obj, fin) && named == Some(child_uid) {
        return Ok(());
    }
    let mut finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == fin) {
        finalizers.push(fin.to_string());
    }
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "annotations": {mark: child_uid},
        "resourceVersion": obj.metadata.resource_version,
    }});
    let name = obj.metadata.name.clone().unwrap_or_default();
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// [`mark`], read again and tried again when another writer changed the object meanwhile (a
/// 409: several bound flows on one kind mark the same object at once). A child this flow just
/// made must not go unnamed for a mere conflict: unnamed, it would be refused as foreign.
pub async fn mark_again_on_conflict(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    fin: &str,
    mark_key: &str,
    child_uid: &str,
) -> kube::Result<()> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let mut current = obj.clone();
    for _ in 0..MARK_TRIES {
        match mark(api, &current, fin, mark_key, child_uid).await {
            Err(kube::Error::Api(e)) if e.code == 409 => current = api.get(&name).await?,
            done => return done,
        }
    }
    mark(api, &current, fin, mark_key, child_uid).await
}

/// How often [`mark_again_on_conflict`] reads the object again after a conflict.
const MARK_TRIES: usize = 5;

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(annotations: serde_json::Value, finalizers: &[&str]) -> DynamicObject {
        serde_json::from_value(
            json!({"metadata": {"name": "w", "namespace": "ops", "uid": "o1",
            "annotations": annotations, "finalizers": finalizers}}),
        )
        .unwrap()
    }

    fn child(uid: &str, object_uid: &str) -> DynamicObject {
        serde_json::from_value(json!({"metadata": {"name": "c", "uid": uid},
            "spec": {"bound": {"object": {"metadata": {"uid": object_uid}}}}}))
        .unwrap()
    }

    #[test]
    fn a_child_that_cannot_be_read_stands_for_no_object_and_says_why() {
        let fin = "ops.example.com/flow-widgets-x";
        let m = mark_key("ops", "widgets");
        let c: DynamicObject = serde_json::from_value(
            json!({"metadata": {"name": "c", "uid": "c1"}, UNREADABLE: "spec: too large"}),
        )
        .unwrap();
        let named = obj(json!({m.clone(): "c1"}), &[fin]);
        match standing(&c, &named, &m, fin) {
            Standing::Foreign(why) => {
                assert_eq!(why, "the PseudoFlow c cannot be read: spec: too large")
            }
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn a_child_is_ours_only_when_the_object_names_its_uid() {
        let m = mark_key("ops", "widgets");
        assert!(m.starts_with("child.ops.example.com/flow-widgets-"), "{m}");
        let fin = "ops.example.com/flow-widgets-x";
        let named = obj(json!({m.clone(): "c1"}), &[fin]);
        assert_eq!(
            standing(&child("c1", "o1"), &named, &m, fin),
            Standing::Ours
        );
        let planted = child("c2", "o1");
        match standing(&planted, &named, &m, fin) {
            Standing::Foreign(why) => assert!(why.contains("not adopted"), "{why}"),
            s => panic!("{s:?}"),
        }
        let unnamed = obj(json!({}), &[]);
        assert!(matches!(
            standing(&planted, &unnamed, &m, fin),
            Standing::Foreign(_)
        ));
    }

    #[test]
    fn a_child_recording_another_object_is_foreign() {
        let m = mark_key("ops", "widgets");
        let named = obj(json!({m.clone(): "c1"}), &[]);
        match standing(&child("c1", "o2"), &named, &m, "f") {
            Standing::Foreign(why) => assert!(why.contains("uid o2"), "{why}"),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn an_old_child_of_an_object_served_before_is_legacy_once() {
        let m = mark_key("ops", "widgets");
        let fin = "ops.example.com/flow-widgets-x";
        let served_before = obj(json!({}), &[fin]);
        assert_eq!(
            standing(&child("c1", "o1"), &served_before, &m, fin),
            Standing::Legacy
        );
    }
}
