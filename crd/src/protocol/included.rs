//! Telling what an `include` source holds: Kubernetes objects to apply, or steps to run in
//! place. Shared by the executor (which fetches the source under the flow's identity) and the
//! controller (which re-reads a Secret the executor reported only by reference and digest).
//! Errors never quote the content: it may come from a Secret.

use crate::steps::apply::manifest_objects;
use crate::steps::include::IncludeAs;
use serde::Deserialize;
use serde_json::Value;

/// An included document, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Classified {
    /// Objects to apply.
    Manifests(Vec<Value>),
    /// A list of steps to run in place.
    Steps(Value),
}

/// Parses every YAML document of `text` (empty ones dropped).
fn documents(text: &str) -> Result<Vec<Value>, ClassifyError> {
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize(doc).map_err(|e| {
            let at = e
                .location()
                .map(|l| format!(" at line {}", l.line()))
                .unwrap_or_default();
            ClassifyError::NotYaml {
                document: i + 1,
                at,
            }
        })?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

fn is_object_manifest(v: &Value) -> bool {
    v.get("apiVersion").is_some_and(Value::is_string) && v.get("kind").is_some_and(Value::is_string)
}

fn is_step(v: &Value) -> bool {
    v.get("type").is_some_and(Value::is_string) && !is_object_manifest(v)
}

/// The step list in a document: a list of objects with `type`, or a map with `steps:`.
fn as_steps(docs: &[Value], forced: bool) -> Option<Value> {
    let [doc] = docs else { return None };
    match doc {
        Value::Array(items) if (forced || !items.is_empty()) && items.iter().all(is_step) => {
            Some(doc.clone())
        }
        Value::Object(m) if !is_object_manifest(doc) => match m.get("steps") {
            Some(list @ Value::Array(_)) => Some(list.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Classifies a fetched document; `as_` overrides the guess. Errors never quote the content.
pub fn classify(text: &str, as_: Option<IncludeAs>) -> Result<Classified, ClassifyError> {
    let docs = documents(text)?;
    if docs.is_empty() {
        return Err(ClassifyError::Empty);
    }
    let manifests = || -> Result<Classified, ClassifyError> {
        let flat: Vec<Value> = docs
            .iter()
            .flat_map(|d| match d {
                Value::Array(items) => items.clone(),
                other => vec![other.clone()],
            })
            .collect();
        let objs = manifest_objects(&Value::Array(flat)).map_err(ClassifyError::NotManifests)?;
        match objs.iter().position(|o| !is_object_manifest(o)) {
            Some(i) => Err(ClassifyError::NotManifests(format!(
                "item {} is not a Kubernetes object (no apiVersion/kind)",
                i + 1
            ))),
            None => Ok(Classified::Manifests(objs)),
        }
    };
    match as_ {
        Some(IncludeAs::Steps) => as_steps(&docs, true)
            .map(Classified::Steps)
            .ok_or(ClassifyError::NotSteps),
        Some(IncludeAs::Manifests) => manifests(),
        None => match as_steps(&docs, false) {
            Some(steps) => Ok(Classified::Steps(steps)),
            None => manifests().map_err(|e| ClassifyError::Unclear(Box::new(e))),
        },
    }
}

/// Why an included document cannot be used; never quotes the content (it may be a Secret's).
#[derive(Debug, thiserror::Error)]
pub enum ClassifyError {
    /// A YAML document does not parse (`at`: " at line N", when known).
    #[error("YAML document {document} is not valid{at}")]
    NotYaml {
        /// Its position in the stream, from 1.
        document: usize,
        /// Where, without the content.
        at: String,
    },
    /// Nothing but empty documents.
    #[error("the document is empty")]
    Empty,
    /// `as: steps` given, but the document holds no step list.
    #[error("as: steps, but the document is not a list of steps (or a map with steps:)")]
    NotSteps,
    /// Not a list of Kubernetes objects (which item, why).
    #[error("{0}")]
    NotManifests(String),
    /// Without `as`, neither steps nor manifests (why it is not manifests).
    #[error("cannot tell whether the document holds manifests or steps ({0}); set `as`")]
    Unclear(Box<ClassifyError>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn steps(text: &str) -> Value {
        match classify(text, None).unwrap() {
            Classified::Steps(s) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn step_lists_and_steps_maps_are_steps() {
        let list = "- type: log\n  message: hi\n- type: sleep\n  seconds: 1\n";
        assert_eq!(steps(list).as_array().unwrap().len(), 2);
        let map = "steps:\n  - type: log\n    message: hi\n";
        assert_eq!(steps(map), json!([{"type": "log", "message": "hi"}]));
    }

    #[test]
    fn objects_are_manifests() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n";
        let Classified::Manifests(objs) = classify(text, None).unwrap() else {
            panic!()
        };
        assert_eq!(objs.len(), 2);
        let list = "- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n";
        assert!(matches!(classify(list, None).unwrap(), Classified::Manifests(o) if o.len() == 1));
        let kind_list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Secret\n  metadata: {name: s}\n";
        assert!(
            matches!(classify(kind_list, None).unwrap(), Classified::Manifests(o) if o.len() == 1)
        );
    }

    #[test]
    fn as_overrides_the_guess() {
        let map = "steps: []\n";
        assert_eq!(
            classify(map, Some(IncludeAs::Steps)).unwrap(),
            Classified::Steps(json!([]))
        );
        let list = "- type: log\n  message: hi\n";
        assert!(classify(list, Some(IncludeAs::Manifests)).is_err());
        let obj = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
        assert!(classify(obj, Some(IncludeAs::Steps)).is_err());
    }

    #[test]
    fn errors_do_not_quote_the_content() {
        let secretish = "password: hunter2\n";
        let e = classify(secretish, None).unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
        let broken = "a: [hunter2\n";
        let e = classify(broken, None).unwrap_err().to_string();
        assert!(!e.contains("hunter2") && e.contains("line"), "{e}");
        assert!(classify("", None).is_err());
    }
}
