//! A bound object decoded alone, from the raw text of its LIST page. Decoded as part of a typed
//! list, one object nested deeper than serde_json's recursion limit (128) failed the whole list,
//! and with it every other object of the kind: none was served, and their deletions hung on the
//! finalizer. Here the page's items are kept as raw text (serde_json skips a raw value without
//! recursing), each is checked for depth ([`pseudoflow_walk::depth`], no recursion) and size, then decoded;
//! one that cannot be is named with why, and the others are served. An object whose fields
//! (its `status` included: `${object.status}`) take more than [`MAX_OBJECT_BYTES`] is measured
//! where the page's text lies and only its metadata and its size are kept (never copied whole,
//! never decoded).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use kube::api::{DynamicObject, TypeMeta};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::limits::MAX_SPEC_DEPTH;
use pseudoflow_walk::depth;

/// How deep an object's fields may nest: a child flow carries them at
/// `spec.bound.object.<field>`, three levels below its spec, whose depth the controller bounds.
pub const MAX_OBJECT_DEPTH: usize = MAX_SPEC_DEPTH - 3;

/// How many bytes an object's fields (all but `metadata`; `status` included, since runs read it
/// as `${object.status}`) may take: its child flow carries them, and must stay well inside what
/// the API server stores (and the controller reads of a flow's spec,
/// [`crate::limits::MAX_FLOW_SPEC_BYTES`]).
pub const MAX_OBJECT_BYTES: usize = 256 * 1024;

/// One LIST page as it comes: its continue token and its items, undecoded.
#[derive(Deserialize)]
pub struct RawPage {
    /// The continue token.
    #[serde(default)]
    pub metadata: ListMeta,
    /// The items, as raw text (an object too large: its metadata and its size, [`keep`]).
    #[serde(default, deserialize_with = "kept_items")]
    pub items: Vec<Box<RawValue>>,
}

/// The key under which [`keep`] records what it measured of an object too large to keep. An
/// object that has it of its own is refused by its own numbers: it can only refuse itself.
const OVERSIZED: &str = "pseudoflow.oversized";

/// What was measured of an object too large to keep.
#[derive(Deserialize)]
struct MeasuredTooLarge {
    bytes: usize,
    field: String,
    field_bytes: usize,
}

/// The items of a page, each [`keep`]'t as it lies in the page's text (which must be borrowed:
/// `serde_json::from_str`).
fn kept_items<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Box<RawValue>>, D::Error> {
    let items: Vec<&'de RawValue> = Vec::deserialize(d)?;
    Ok(items.into_iter().map(keep).collect())
}

/// `item` as it is, or, when its fields take more than [`MAX_OBJECT_BYTES`], its [`stub`]: the
/// object itself is never copied.
fn keep(item: &RawValue) -> Box<RawValue> {
    stub(item).unwrap_or_else(|| item.to_owned())
}

/// An object read alone (a GET's text), cut as a page's items are ([`keep`]): its text, or its
/// [`stub`] when it is too large.
pub fn cut(text: String) -> String {
    let stubbed = match serde_json::from_str::<&RawValue>(&text) {
        Ok(item) => stub(item).map(|s| s.get().to_string()),
        Err(_) => None,
    };
    stubbed.unwrap_or(text)
}

/// When `item`'s fields take more than [`MAX_OBJECT_BYTES`]: its metadata and what was measured
/// (under [`OVERSIZED`]).
fn stub(item: &RawValue) -> Option<Box<RawValue>> {
    if item.get().len() <= MAX_OBJECT_BYTES {
        return None;
    }
    let fields = serde_json::from_str::<BTreeMap<String, &RawValue>>(item.get()).ok()?;
    let (bytes, (field, field_bytes)) = measure(&fields);
    if bytes <= MAX_OBJECT_BYTES {
        return None;
    }
    let metadata = fields.get("metadata").map_or("{}", |m| m.get());
    let stub = format!(
        r#"{{"metadata":{metadata},"{OVERSIZED}":{{"bytes":{bytes},"field":{},"field_bytes":{field_bytes}}}}}"#,
        Value::String(field)
    );
    RawValue::from_string(stub).ok()
}

/// The bytes an object's fields take (all but `metadata`, `apiVersion` and `kind`; `status`
/// counts), and its largest field with its bytes.
fn measure(fields: &BTreeMap<String, &RawValue>) -> (usize, (String, usize)) {
    let mut bytes = 0;
    let mut largest = (String::new(), 0);
    for (k, v) in fields {
        if matches!(k.as_str(), "metadata" | "apiVersion" | "kind") {
            continue;
        }
        let n = v.get().len();
        bytes += n;
        if n > largest.1 {
            largest = (k.clone(), n);
        }
    }
    (bytes, largest)
}

/// Why an object is too large, naming its largest field.
fn too_large(bytes: usize, field: &str, field_bytes: usize) -> String {
    format!(
        "its fields take {bytes} bytes ({field}: {field_bytes}), more than the \
         {MAX_OBJECT_BYTES} bytes its flow may carry; it is not read"
    )
}

/// An object that cannot be served as it is, named as the bound flow's status names objects.
#[derive(Debug, PartialEq)]
pub struct Unreadable {
    /// `namespace/name` (`item N of a page` when even its metadata cannot be read).
    pub object: String,
    /// Why.
    pub message: String,
    /// Its metadata, when that could be read (enough to let it go when it is deleted).
    pub meta: Option<Box<ObjectMeta>>,
}

/// The object `raw` (item `index` of its page), without its managed fields (which no child
/// reads; its `status` is kept, for `${object.status}`), or why it cannot be served: too deep,
/// too large, not an object.
pub fn object(raw: &str, index: usize) -> Result<DynamicObject, Unreadable> {
    let unreadable = |object: String, message: String| Unreadable {
        object,
        message,
        meta: None,
    };
    let fields: BTreeMap<String, &RawValue> = serde_json::from_str(raw).map_err(|e| {
        unreadable(
            format!("item {index} of a page"),
            format!("not an object: {e}"),
        )
    })?;
    let metadata = match fields.get("metadata") {
        Some(m) => meta(m.get())
            .map_err(|e| unreadable(format!("item {index} of a page"), format!("metadata: {e}")))?,
        None => ObjectMeta::default(),
    };
    let key = match &metadata.namespace {
        Some(ns) => format!("{ns}/{}", metadata.name.as_deref().unwrap_or_default()),
        None => metadata.name.clone().unwrap_or_default(),
    };
    let fail = |message: String| Unreadable {
        object: key.clone(),
        message,
        meta: Some(Box::new(metadata.clone())),
    };
    if let Some(o) = fields.get(OVERSIZED) {
        let o: MeasuredTooLarge =
            serde_json::from_str(o.get()).map_err(|e| fail(format!("{OVERSIZED}: {e}")))?;
        return Err(fail(too_large(o.bytes, &o.field, o.field_bytes)));
    }
    // Measured before anything is decoded.
    let (bytes, (field, field_bytes)) = measure(&fields);
    if bytes > MAX_OBJECT_BYTES {
        return Err(fail(too_large(bytes, &field, field_bytes)));
    }
    let mut data = serde_json::Map::new();
    for (k, v) in &fields {
        if matches!(k.as_str(), "metadata" | "apiVersion" | "kind") {
            continue;
        }
        depth::check(v.get(), k, MAX_OBJECT_DEPTH).map_err(|e| fail(e.to_string()))?;
        let value: Value = serde_json::from_str(v.get()).map_err(|e| fail(format!("{k}: {e}")))?;
        data.insert(k.clone(), value);
    }
    let text = |k: &str| {
        fields
            .get(k)
            .and_then(|v| serde_json::from_str(v.get()).ok())
    };
    let types = match (text("apiVersion"), text("kind")) {
        (Some(api_version), Some(kind)) => Some(TypeMeta { api_version, kind }),
        _ => None,
    };
    Ok(DynamicObject {
        types,
        metadata,
        data: Value::Object(data),
    })
}

/// `metadata` decoded without its `managedFields` (whose `fieldsV1` mirror the object's
/// nesting), which are skipped unread.
fn meta(raw: &str) -> serde_json::Result<ObjectMeta> {
    let mut fields: BTreeMap<String, Box<RawValue>> = serde_json::from_str(raw)?;
    fields.remove("managedFields");
    serde_json::from_str(&serde_json::to_string(&fields)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "{\"a\":".repeat(levels), "}".repeat(levels))
    }

    fn widget(name: &str, spec: &str) -> String {
        format!(
            r#"{{"apiVersion":"x/v1","kind":"Widget","metadata":{{"name":"{name}","namespace":"ops","managedFields":[{{"fieldsV1":{fields}}}]}},"spec":{spec},"status":{status}}}"#,
            fields = nested(200),
            status = nested(3)
        )
    }

    #[test]
    fn a_page_with_one_object_too_deep_for_serde_still_reads_the_others() {
        let page = format!(
            r#"{{"metadata":{{"continue":"t"}},"items":[{},{}]}}"#,
            widget("deep", &nested(130)),
            widget("ok", r#"{"version":"1"}"#)
        );
        let page: RawPage = serde_json::from_str(&page).unwrap();
        assert_eq!(page.metadata.continue_.as_deref(), Some("t"));
        let deep = object(page.items[0].get(), 0).unwrap_err();
        assert_eq!(deep.object, "ops/deep");
        assert_eq!(deep.meta.unwrap().name.as_deref(), Some("deep"));
        assert!(deep.message.contains("spec.a.a"), "{}", deep.message);
        assert!(deep.message.contains("nested deeper"), "{}", deep.message);
        let ok = object(page.items[1].get(), 1).unwrap();
        let status = serde_json::json!({"a": {"a": {"a": 1}}});
        assert_eq!(
            ok.data,
            serde_json::json!({"spec": {"version": "1"}, "status": status})
        );
        assert_eq!(ok.types.unwrap().kind, "Widget");
        assert!(ok.metadata.managed_fields.is_none());
    }

    #[test]
    fn an_object_too_large_is_named_with_its_size() {
        let big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(MAX_OBJECT_BYTES));
        let e = object(&widget("big", &big), 0).unwrap_err();
        assert_eq!(e.object, "ops/big");
        assert!(e.message.contains("more than the 262144"), "{}", e.message);
    }

    #[test]
    fn a_page_keeps_of_an_object_too_large_only_its_metadata_and_size_and_names_its_field() {
        let big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(MAX_OBJECT_BYTES));
        let page = format!(
            r#"{{"metadata":{{}},"items":[{},{}]}}"#,
            widget("big", &big),
            widget("ok", r#"{"version":"1"}"#)
        );
        let page: RawPage = serde_json::from_str(&page).unwrap();
        assert!(page.items[0].get().len() < 10_000, "not kept whole");
        let e = object(page.items[0].get(), 0).unwrap_err();
        assert_eq!(e.object, "ops/big");
        assert_eq!(e.meta.unwrap().name.as_deref(), Some("big"));
        assert!(
            e.message.contains("(spec: 262155)") && e.message.contains("more than the 262144"),
            "{}",
            e.message
        );
        assert!(object(page.items[1].get(), 1).is_ok());
        // Read alone, the same.
        let alone = cut(widget("big", &big));
        assert!(alone.len() < 10_000, "not kept whole");
        assert_eq!(object(&alone, 0).unwrap_err().message, e.message);
        let ok = widget("ok", r#"{"version":"1"}"#);
        assert_eq!(cut(ok.clone()), ok);
    }

    #[test]
    fn a_status_counts_as_a_field_in_depth_and_size() {
        let deep = widget("deep", r#"{"version":"1"}"#).replace(&nested(3), &nested(130));
        let e = object(&deep, 0).unwrap_err();
        assert!(e.message.contains("status.a.a"), "{}", e.message);
        let big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(MAX_OBJECT_BYTES));
        let big = widget("big", r#"{"version":"1"}"#).replace(&nested(3), &big);
        let e = object(&cut(big), 0).unwrap_err();
        assert!(e.message.contains("(status: 262155)"), "{}", e.message);
    }

    #[test]
    fn an_item_that_is_no_object_is_named_by_its_place() {
        let e = object("[1]", 3).unwrap_err();
        assert_eq!(e.object, "item 3 of a page");
    }
}
