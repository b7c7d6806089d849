//! What a bound flow's watch decodes of each object: its metadata without `managedFields`, and
//! nothing else. An event only wakes the bound flow (which reads each object alone,
//! [`super::decode`]), and `managedFields` mirror the object's nesting: decoded, one object
//! nested past serde_json's recursion limit failed the watch's list, and with it the binding
//! for every object. Every other field is skipped unread (serde_json skips without recursing).
//! And the API server is asked for metadata only ([`Resource::metadata_api`]): read whole, a
//! LIST page of 100 objects of 1.2 MB was 120 MB of text before any of it was skipped.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicResourceScope;
use kube::discovery::ApiResource;
use kube::Resource;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// An object of a watched kind, as far as a watch reads it.
#[derive(Debug, Clone, Default)]
pub struct Watched {
    /// Its metadata, without `managedFields`.
    pub metadata: ObjectMeta,
}

impl<'de> Deserialize<'de> for Watched {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Option<Box<RawValue>>,
        }
        let wire = Wire::deserialize(d)?;
        let metadata = match wire.metadata {
            Some(raw) => meta(raw.get()).map_err(D::Error::custom)?,
            None => ObjectMeta::default(),
        };
        Ok(Watched { metadata })
    }
}

/// `metadata` decoded without its `managedFields`, which are skipped unread.
fn meta(raw: &str) -> serde_json::Result<ObjectMeta> {
    let mut fields: BTreeMap<String, Box<RawValue>> = serde_json::from_str(raw)?;
    fields.remove("managedFields");
    serde_json::from_str(&serde_json::to_string(&fields)?)
}

impl Resource for Watched {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn metadata_api() -> bool {
        true
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

    #[test]
    fn an_object_nested_past_serdes_limit_is_read_for_its_metadata() {
        let deep = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
        let text = format!(
            r#"{{"metadata":{{"name":"w","resourceVersion":"7","managedFields":[{{"fieldsV1":{}}}]}},"spec":{}}}"#,
            deep(300),
            deep(300)
        );
        let w: Watched = serde_json::from_str(&text).unwrap();
        assert_eq!(w.metadata.name.as_deref(), Some("w"));
        assert_eq!(w.metadata.resource_version.as_deref(), Some("7"));
        assert!(w.metadata.managed_fields.is_none());
        let list = format!(r#"{{"metadata":{{}},"items":[{text}]}}"#);
        let l: kube::core::ObjectList<Watched> = serde_json::from_str(&list).unwrap();
        assert_eq!(l.items.len(), 1);
    }
}
