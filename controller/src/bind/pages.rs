//! Lists of a bound flow's objects and child flows, read a page at a time and each item cut to
//! what the reconcile reads as it comes: a bound flow serving 1,000 objects would otherwise
//! hold two full lists (every child flow's status with its steps) at once, at every wake.

use kube::api::{Api, DynamicObject, ListParams};

/// Items per LIST request: the most a reconcile holds in full at once.
pub const PAGE: u32 = 100;

/// Every item `lp` selects, `keep` applied to each as its page comes.
pub async fn list_kept<T>(
    api: &Api<DynamicObject>,
    lp: &ListParams,
    mut keep: impl FnMut(DynamicObject) -> Option<T>,
) -> Result<Vec<T>, kube::Error> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut page = lp.clone().limit(PAGE);
        if let Some(t) = token.take() {
            page = page.continue_token(&t);
        }
        let list = api.list(&page).await?;
        out.extend(list.items.into_iter().filter_map(&mut keep));
        match list.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(t) => token = Some(t),
            None => return Ok(out),
        }
    }
}

/// A child flow cut to what serving its object and summing up read: metadata, `spec.bound`
/// (the object as it was last run for) and the status's phase, message and last run time.
pub fn slim_child(mut child: DynamicObject) -> DynamicObject {
    let bound = child.data["spec"]["bound"].take();
    let status = child.data.get("status").map(|st| {
        serde_json::json!({
            "phase": st["phase"],
            "message": st["message"],
            "lastRunTime": st["lastRunTime"],
        })
    });
    child.metadata.managed_fields = None;
    child.data = serde_json::json!({"spec": {"bound": bound}});
    if let Some(st) = status {
        child.data["status"] = st;
    }
    child
}

/// An object cut to what the reconcile reads: everything but its status and managed fields
/// (`${object}` never holds the status; see `object::view`).
pub fn slim_object(mut obj: DynamicObject) -> DynamicObject {
    obj.metadata.managed_fields = None;
    if let Some(o) = obj.data.as_object_mut() {
        o.remove("status");
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slim_child_keeps_what_serving_and_summing_up_read_and_drops_the_rest() {
        let child: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "c", "annotations": {"a": "b"}},
            "spec": {"steps": [{"type": "log", "message": "x"}], "bound": {"object": {"spec": {"x": 1}}}},
            "status": {"phase": "Failed", "message": "why", "lastRunTime": "t",
                "steps": [{"id": "s0"}], "conditions": []}
        }))
        .unwrap();
        let slim = slim_child(child);
        assert_eq!(slim.data["spec"]["bound"]["object"]["spec"]["x"], 1);
        assert!(slim.data["spec"].get("steps").is_none());
        assert_eq!(slim.data["status"]["phase"], "Failed");
        assert_eq!(slim.data["status"]["message"], "why");
        assert!(slim.data["status"].get("steps").is_none());
        assert_eq!(slim.metadata.annotations.unwrap()["a"], "b");
    }
}
