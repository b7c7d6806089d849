//! The mark `copy` puts on every object it writes, naming the flow that wrote it, so that a copy
//! never overwrites, and a `delete` with `onlyCopies` never removes, an object the flow did not
//! make (docs/decisions.md#copies-take-only-what-is-theirs). Whoever may write the object can
//! forge the mark, but only on an object they could overwrite or delete themselves.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::context::ExecCtx;

pub use pseudoflow_crd::steps::copy::{COPIED_BY, COPIED_FROM};

/// This flow's mark: its namespace and name (a bound flow's child keeps its name across a
/// re-created parent, so its copies stay its own).
pub fn mark(ctx: &ExecCtx) -> String {
    let f = &ctx.input.flow;
    format!("{}/{}", f.namespace, f.name)
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Whether `meta` is a copy this flow made: its mark names this flow, or (a copy written before
/// marks named flows) it has no flow mark and names `source` as where it was copied from.
pub fn is_ours(meta: &ObjectMeta, mark: &str, source: Option<&str>) -> bool {
    match annotation(meta, COPIED_BY) {
        Some(by) => by == mark,
        None => source.is_some_and(|s| annotation(meta, COPIED_FROM) == Some(s)),
    }
}

/// Who the object in the way belongs to, as far as it says: the flow whose copy it is, its
/// controller owner, or the field managers that wrote it.
pub fn owner(meta: &ObjectMeta) -> String {
    if let Some(by) = annotation(meta, COPIED_BY) {
        return format!("a copy made by flow {by}");
    }
    let owners = meta.owner_references.as_deref().unwrap_or_default();
    if let Some(o) = owners
        .iter()
        .find(|o| o.controller == Some(true))
        .or(owners.first())
    {
        return format!("owned by {} {}", o.kind, o.name);
    }
    let mut managers: Vec<&str> = meta
        .managed_fields
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    managers.dedup();
    if managers.is_empty() {
        "no owner it names".into()
    } else {
        format!("written by {}", managers.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(v: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_this_flows_mark_or_an_unmarked_copy_of_the_same_source_is_ours() {
        let ours = meta(json!({"annotations": {COPIED_BY: "ns/f", COPIED_FROM: "ns/s"}}));
        assert!(is_ours(&ours, "ns/f", Some("ns/s")));
        assert!(is_ours(&ours, "ns/f", None));
        let other = meta(json!({"annotations": {COPIED_BY: "ns/g", COPIED_FROM: "ns/s"}}));
        assert!(!is_ours(&other, "ns/f", Some("ns/s")));
        let legacy = meta(json!({"annotations": {COPIED_FROM: "ns/s"}}));
        assert!(is_ours(&legacy, "ns/f", Some("ns/s")));
        assert!(!is_ours(&legacy, "ns/f", Some("ns/t")));
        assert!(
            !is_ours(&legacy, "ns/f", None),
            "a delete needs the flow's mark"
        );
        assert!(!is_ours(&meta(json!({})), "ns/f", Some("ns/s")));
    }

    #[test]
    fn the_owner_in_the_way_is_named_by_what_the_object_says() {
        let by = meta(json!({"annotations": {COPIED_BY: "ns/g"}}));
        assert_eq!(owner(&by), "a copy made by flow ns/g");
        let owned = meta(
            json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ServiceAccount",
            "name": "sa", "uid": "u", "controller": true}]}),
        );
        assert_eq!(owner(&owned), "owned by ServiceAccount sa");
        let managed =
            meta(json!({"managedFields": [{"manager": "team-a-admin", "operation": "Update"}]}));
        assert_eq!(owner(&managed), "written by team-a-admin");
        assert_eq!(owner(&meta(json!({}))), "no owner it names");
    }
}
