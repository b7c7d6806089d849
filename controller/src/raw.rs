//! The flow as the controller's watch decodes it. `spec` and `status` stay raw JSON text, which
//! serde_json skips iteratively (no recursion, so no depth limit), and `metadata.managedFields`
//! (whose `fieldsV1` mirror the spec's nesting) is dropped unread. So one flow nested deeper than
//! serde_json's limit of 128 cannot fail the LIST that holds every flow: it fails alone, in its
//! own reconcile, which checks the depth ([`pseudoflow_walk::depth`]) before anything parses the spec.
//! A spec larger than [`MAX_FLOW_SPEC_BYTES`] is dropped as it is decoded (only its size is
//! kept), so the watch's store never holds it, and the flow's reconcile refuses it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, TypeMeta};
use kube::core::NamespaceResourceScope;
use kube::Resource;
use pseudoflow_crd::PseudoFlow;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::limits::{MAX_FLOW_SPEC_BYTES, MAX_SPEC_DEPTH};
use pseudoflow_walk::depth::{self, TooDeep};

/// A PseudoFlow with its `spec` and `status` undecoded.
#[derive(Debug, Clone)]
pub struct RawFlow {
    /// Everything but `managedFields`.
    pub metadata: ObjectMeta,
    /// The spec as written, read without a recursion limit; its depth is checked before parsing.
    pub spec: Option<Box<RawValue>>,
    /// The status as last written, likewise kept raw.
    pub status: Option<Box<RawValue>>,
    /// The spec's size in bytes when it was larger than [`MAX_FLOW_SPEC_BYTES`]: then `spec` is
    /// `None`, never held.
    pub oversized: Option<usize>,
}

/// Why a flow cannot become the untyped object the reconcile reads.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The document nests deeper than the controller reads.
    #[error(transparent)]
    TooDeep(#[from] TooDeep),
    /// The document is not the JSON it should be (which part, the error).
    #[error("{0}: {1}")]
    Json(&'static str, serde_json::Error),
    /// The spec is larger than the controller reads.
    #[error(
        "spec: the flow's spec takes {0} bytes, more than the {MAX_FLOW_SPEC_BYTES} bytes the \
         controller reads of a flow; it is not read"
    )]
    TooLarge(usize),
}

impl RawFlow {
    /// The flow as a [`DynamicObject`] (what the rest of the reconcile reads), once its spec is
    /// known to nest at most [`MAX_SPEC_DEPTH`] deep. A status nested deeper (only someone
    /// allowed to write `pseudoflows/status` can do that) is read as absent.
    pub fn decode(&self) -> Result<DynamicObject, DecodeError> {
        if let Some(bytes) = self.oversized {
            return Err(DecodeError::TooLarge(bytes));
        }
        let mut data = serde_json::Map::new();
        if let Some(spec) = &self.spec {
            depth::check(spec.get(), "spec", MAX_SPEC_DEPTH)?;
            let v = serde_json::from_str(spec.get()).map_err(|e| DecodeError::Json("spec", e))?;
            data.insert("spec".into(), v);
        }
        if let Some(status) = self.status_value() {
            data.insert("status".into(), status);
        }
        Ok(DynamicObject {
            types: Some(TypeMeta {
                api_version: PseudoFlow::api_version(&()).into(),
                kind: PseudoFlow::kind(&()).into(),
            }),
            metadata: self.metadata.clone(),
            data: Value::Object(data),
        })
    }

    /// `status`, when it can be read (absent, malformed or too deep: `None`).
    pub fn status_value(&self) -> Option<Value> {
        let raw = self.status.as_ref()?.get();
        depth::check(raw, "status", MAX_SPEC_DEPTH).ok()?;
        serde_json::from_str(raw).ok()
    }
}

/// The bytes `v` takes as compact JSON (counted, not written): what the webhook measures of a
/// spec against [`MAX_FLOW_SPEC_BYTES`], so a flow the controller would not read is refused
/// when it is written.
pub fn json_bytes(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, v);
    count.0
}

impl<'de> Deserialize<'de> for RawFlow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Option<Box<RawValue>>,
            #[serde(default)]
            spec: Option<Box<RawValue>>,
            #[serde(default)]
            status: Option<Box<RawValue>>,
        }
        let wire = Wire::deserialize(d)?;
        let metadata = match wire.metadata {
            Some(raw) => without_managed_fields(raw.get()).map_err(D::Error::custom)?,
            None => ObjectMeta::default(),
        };
        let size = wire.spec.as_ref().map_or(0, |s| s.get().len());
        let (spec, oversized) = match wire.spec {
            Some(_) if size > MAX_FLOW_SPEC_BYTES => (None, Some(size)),
            spec => (spec, None),
        };
        Ok(RawFlow {
            metadata,
            spec,
            status: wire.status,
            oversized,
        })
    }
}

/// `metadata` decoded without its `managedFields`, which are skipped unread.
fn without_managed_fields(raw: &str) -> serde_json::Result<ObjectMeta> {
    let mut fields: BTreeMap<String, Box<RawValue>> = serde_json::from_str(raw)?;
    fields.remove("managedFields");
    serde_json::from_str(&serde_json::to_string(&fields)?)
}

impl Resource for RawFlow {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        PseudoFlow::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        PseudoFlow::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        PseudoFlow::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        PseudoFlow::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectList;
    use kube::core::WatchEvent;
    use serde_json::json;

    /// A list nested `depth` deep, as text (a `Value` that deep would overflow the stack
    /// serializing and dropping it).
    fn nested(depth: usize) -> String {
        format!("{}\"leaf\"{}", "[".repeat(depth), "]".repeat(depth))
    }

    /// A flow whose forEach is `for_each` and whose managedFields nest `depth` deep, as the API
    /// server sends it.
    fn flow(name: &str, for_each: &str, depth: usize) -> String {
        let fields = format!("{}{{}}{}", r#"{"f:x":"#.repeat(depth), "}".repeat(depth));
        format!(
            r#"{{"apiVersion":"ops.example.com/v1alpha1","kind":"PseudoFlow",
            "metadata":{{"name":"{name}","namespace":"ns","uid":"u","generation":1,
              "managedFields":[{{"manager":"kubectl","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{fields}}}]}},
            "spec":{{"steps":[{{"type":"loop","forEach":{for_each},"steps":[]}}]}},
            "status":{{"phase":"Running"}}}}"#
        )
    }

    #[test]
    fn a_list_with_one_flow_nested_far_beyond_serdes_limit_decodes_and_only_that_flow_fails() {
        let deep = 5_000;
        let text = format!(
            r#"{{"apiVersion":"ops.example.com/v1alpha1","kind":"PseudoFlowList","metadata":{{"resourceVersion":"7"}},
            "items":[{},{},{}]}}"#,
            flow("a", "[1]", 3),
            flow("b", &nested(deep), deep),
            flow("c", "[2]", 3)
        );
        assert!(
            serde_json::from_str::<ObjectList<DynamicObject>>(&text).is_err(),
            "the untyped object fails the whole LIST"
        );
        let flows: ObjectList<RawFlow> = serde_json::from_str(&text).unwrap();
        let names: Vec<_> = flows
            .iter()
            .map(|f| f.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        let a = flows.items[0].decode().unwrap();
        assert_eq!(a.data["spec"]["steps"][0]["forEach"], json!([1]));
        assert_eq!(a.data["status"]["phase"], "Running");
        assert_eq!(a.metadata.generation, Some(1));
        assert!(a.metadata.managed_fields.is_none());
        match flows.items[1].decode() {
            Err(DecodeError::TooDeep(e)) => {
                assert!(e.path.starts_with("spec.steps[0].forEach[0]"), "{e}");
                assert_eq!(e.limit, MAX_SPEC_DEPTH);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            flows.items[1].status_value(),
            Some(json!({"phase": "Running"}))
        );
    }

    #[test]
    fn a_watch_event_of_a_deep_flow_decodes_and_only_its_spec_is_refused() {
        let event = format!(
            r#"{{"type":"ADDED","object":{}}}"#,
            flow("b", &nested(300), 300)
        );
        match serde_json::from_str::<WatchEvent<RawFlow>>(&event).unwrap() {
            WatchEvent::Added(f) => {
                assert_eq!(f.metadata.name.as_deref(), Some("b"));
                assert!(matches!(f.decode(), Err(DecodeError::TooDeep(_))));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_spec_over_the_limit_is_dropped_as_it_is_read_and_refused_naming_the_limit() {
        let text = |n: usize| {
            format!(
                r#"{{"metadata":{{"name":"x"}},"spec":{{"steps":[{{"type":"log","message":"{}"}}]}}}}"#,
                "x".repeat(n)
            )
        };
        let fits: RawFlow = serde_json::from_str(&text(MAX_FLOW_SPEC_BYTES - 100)).unwrap();
        assert!(fits.spec.is_some() && fits.oversized.is_none());
        assert!(fits.decode().is_ok());
        let big: RawFlow = serde_json::from_str(&text(MAX_FLOW_SPEC_BYTES)).unwrap();
        assert!(big.spec.is_none(), "not held");
        assert_eq!(big.metadata.name.as_deref(), Some("x"));
        let e = big.decode().unwrap_err();
        assert!(matches!(e, DecodeError::TooLarge(n) if n > MAX_FLOW_SPEC_BYTES));
        let message = e.to_string();
        assert!(
            message.starts_with("spec: ") && message.contains("more than the 524288 bytes"),
            "{message}"
        );
    }

    #[test]
    fn a_status_nested_too_deep_reads_as_absent() {
        let f: RawFlow =
            serde_json::from_str(r#"{"metadata":{"name":"x"},"spec":{"steps":[]}}"#).unwrap();
        assert!(f.decode().unwrap().data.get("status").is_none());
        let deep = format!(
            r#"{{"metadata":{{"name":"x"}},"spec":{{"steps":[]}},"status":{{"x":{}}}}}"#,
            nested(100)
        );
        let f: RawFlow = serde_json::from_str(&deep).unwrap();
        assert_eq!(f.status_value(), None);
        assert!(f.decode().unwrap().data.get("status").is_none());
    }
}
