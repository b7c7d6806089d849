//! `Task::FetchInclude`: fetch an `include` source (http(s) URL, ConfigMap key, Secret key),
//! decide whether it holds Kubernetes objects or steps (`as` overrides the guess), apply the
//! objects, and return steps raw for the controller to compile. Secret content never appears
//! in a message.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject};
use pseudoflow_compiler::result::{IncludedDocument, StepResult};
use pseudoflow_crd::steps::apply::manifest_objects;
use pseudoflow_crd::steps::include::{IncludeAs, IncludeSource, KeyRef};
use pseudoflow_crd::{PseudoFlow, Step, StepKind};
use serde::Deserialize;
use serde_json::Value;

use crate::context::Ctx;
use crate::error::{is_not_found, Call, StepError};
use crate::steps::apply;

/// An included document, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Classified {
    /// Objects to apply.
    Manifests(Vec<Value>),
    /// A list of steps to run in place.
    Steps(Value),
}

/// Parses every YAML document of `text` (empty ones dropped).
fn documents(text: &str) -> Result<Vec<Value>, String> {
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize(doc).map_err(|e| {
            let at = e
                .location()
                .map(|l| format!(" at line {}", l.line()))
                .unwrap_or_default();
            format!("YAML document {} is not valid{at}", i + 1)
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
pub fn classify(text: &str, as_: Option<IncludeAs>) -> Result<Classified, String> {
    let docs = documents(text)?;
    if docs.is_empty() {
        return Err("the document is empty".into());
    }
    let manifests = || -> Result<Classified, String> {
        let flat: Vec<Value> = docs
            .iter()
            .flat_map(|d| match d {
                Value::Array(items) => items.clone(),
                other => vec![other.clone()],
            })
            .collect();
        let objs = manifest_objects(&Value::Array(flat))?;
        match objs.iter().position(|o| !is_object_manifest(o)) {
            Some(i) => Err(format!(
                "item {} is not a Kubernetes object (no apiVersion/kind)",
                i + 1
            )),
            None => Ok(Classified::Manifests(objs)),
        }
    };
    match as_ {
        Some(IncludeAs::Steps) => as_steps(&docs, true).map(Classified::Steps).ok_or_else(|| {
            "as: steps, but the document is not a list of steps (or a map with steps:)".into()
        }),
        Some(IncludeAs::Manifests) => manifests(),
        None => match as_steps(&docs, false) {
            Some(steps) => Ok(Classified::Steps(steps)),
            None => manifests().map_err(|e| {
                format!("cannot tell whether the document holds manifests or steps ({e}); set `as`")
            }),
        },
    }
}

/// Fetches the include source's text; `secret` is true when it came from a Secret.
async fn fetch(ctx: &Ctx, source: &IncludeSource) -> Result<(String, bool), StepError> {
    let refs = match source {
        IncludeSource::Url(url) => {
            let text = crate::http::fetch_text(url)
                .await?
                .ok_or_else(|| StepError::failed(format!("GET {url}: HTTP 404 Not Found")))?;
            return Ok((text, false));
        }
        IncludeSource::Ref(refs) => refs,
    };
    let ns = ctx.namespace();
    let client = ctx.client().await?;
    let missing = |kind: &str, r: &KeyRef| {
        StepError::failed(format!("{kind} {ns}/{} has no key {:?}", r.name, r.key))
    };
    match (&refs.config_map_ref, &refs.secret_ref) {
        (Some(r), _) => {
            let api: Api<ConfigMap> = Api::namespaced(client, ns);
            let call = Call {
                verb: "get",
                resource: "configmaps",
                name: &r.name,
                namespace: Some(ns),
            };
            let cm = get(ctx, api.get(&r.name).await, call)?;
            let text = cm.data.and_then(|mut d| d.remove(&r.key)).or_else(|| {
                cm.binary_data
                    .and_then(|mut d| d.remove(&r.key))
                    .and_then(|b| String::from_utf8(b.0).ok())
            });
            Ok((text.ok_or_else(|| missing("ConfigMap", r))?, false))
        }
        (None, Some(r)) => {
            let api: Api<Secret> = Api::namespaced(client, ns);
            let call = Call {
                verb: "get",
                resource: "secrets",
                name: &r.name,
                namespace: Some(ns),
            };
            let secret = get(ctx, api.get(&r.name).await, call)?;
            let bytes = secret
                .data
                .and_then(|mut d| d.remove(&r.key))
                .map(|b| b.0)
                .or_else(|| {
                    secret
                        .string_data
                        .and_then(|mut d| d.remove(&r.key))
                        .map(String::into_bytes)
                })
                .ok_or_else(|| missing("Secret", r))?;
            let text = String::from_utf8(bytes).map_err(|_| {
                StepError::failed(format!(
                    "Secret {ns}/{} key {:?} is not UTF-8 text",
                    r.name, r.key
                ))
            })?;
            Ok((text, true))
        }
        (None, None) => Err(StepError::input(
            "include source has neither configMapRef nor secretRef",
        )),
    }
}

/// `includeFlow`: reads the other PseudoFlow under the flow's own ServiceAccount (so a flow can
/// only include flows its identity may read) and returns its steps and vars.
async fn fetch_flow(
    ctx: &Ctx,
    name: &str,
    namespace: Option<&str>,
) -> Result<StepResult, StepError> {
    let ns = namespace.unwrap_or(ctx.namespace());
    let client = ctx.client().await?;
    let ar = ApiResource::erase::<PseudoFlow>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client, ns, &ar);
    let call = Call {
        verb: "get",
        resource: "pseudoflows",
        name,
        namespace: Some(ns),
    };
    let flow = get(ctx, api.get(name).await, call)?;
    let spec = &flow.data["spec"];
    let steps = spec["steps"].clone();
    let n = steps.as_array().map_or(0, Vec::len);
    let vars = spec["vars"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().map_or_else(|| v.to_string(), str::to_string),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut r = StepResult::succeeded(false, format!("included {n} steps of flow {ns}/{name}"));
    r.include = Some(IncludedDocument::Steps { steps, vars });
    Ok(r)
}

fn get<T>(ctx: &Ctx, r: Result<T, kube::Error>, call: Call) -> Result<T, StepError> {
    r.map_err(|e| {
        if is_not_found(&e) {
            StepError::failed(format!(
                "{} {:?} not found in namespace {}",
                call.resource,
                call.name,
                call.namespace.unwrap_or("")
            ))
        } else {
            ctx.api_err(e, call)
        }
    })
}

/// Fetches, classifies and (for manifests) applies the included document.
pub async fn run(ctx: &Ctx, step: &Step) -> Result<StepResult, StepError> {
    if let StepKind::IncludeFlow(p) = &step.kind {
        let name = step.name.as_deref().unwrap_or_default();
        return fetch_flow(ctx, name, p.namespace.as_deref()).await;
    }
    let StepKind::Include(inc) = &step.kind else {
        return Err(StepError::input(format!(
            "task fetchInclude needs an include step, got {}",
            step.kind.type_name()
        )));
    };
    let (text, secret) = fetch(ctx, &inc.source).await?;
    let classified = classify(&text, inc.as_).map_err(|e| {
        let origin = if secret {
            "the included Secret key"
        } else {
            "the included document"
        };
        StepError::failed(format!("{origin}: {e}"))
    })?;
    drop(text);
    match classified {
        Classified::Steps(steps) => {
            let n = steps.as_array().map_or(0, Vec::len);
            let mut r = StepResult::succeeded(false, format!("included {n} steps"));
            r.include = Some(IncludedDocument::Steps {
                steps,
                vars: Default::default(),
            });
            Ok(r)
        }
        Classified::Manifests(objs) => {
            let applied = apply::apply_objects(ctx, objs).await?;
            let mut r = StepResult::succeeded(applied.changed, apply::summary(&applied));
            r.include = Some(IncludedDocument::Manifests {
                applied: applied.objects,
            });
            Ok(r)
        }
    }
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
        let e = classify(secretish, None).unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        let broken = "a: [hunter2\n";
        let e = classify(broken, None).unwrap_err();
        assert!(!e.contains("hunter2") && e.contains("line"), "{e}");
        assert!(classify("", None).is_err());
    }
}
