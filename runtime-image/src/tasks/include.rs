//! `Task::FetchInclude`: fetch an `include` source (http(s) URL, ConfigMap key, Secret key),
//! decide whether it holds Kubernetes objects or steps (`as` overrides the guess), apply the
//! objects (`${...}` substituted inside their values, crate::body), and return steps raw for the controller to compile. Secret content never appears
//! in a message, nor in the result: steps from a Secret are reported by reference and digest
//! (the controller reads them again and checks the digest), because the result travels through
//! the pod's termination message, which whoever may read pods can read.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject};
use pseudoflow_crd::protocol::content_digest;
use pseudoflow_crd::protocol::{classify, Classified};
use pseudoflow_crd::protocol::{IncludedDocument, StepResult};
use pseudoflow_crd::steps::include::{IncludeSource, KeyRef};
use pseudoflow_crd::{PseudoFlow, Step, StepKind};

use crate::context::ExecCtx;
use crate::error::{is_not_found, Call, StepError};
use crate::steps::apply;

/// Fetches the include source's text; `secret` is true when it came from a Secret.
async fn fetch(ctx: &ExecCtx, source: &IncludeSource) -> Result<(String, bool), StepError> {
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
    ctx: &ExecCtx,
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

fn get<T>(ctx: &ExecCtx, r: Result<T, kube::Error>, call: Call) -> Result<T, StepError> {
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
pub async fn run(ctx: &ExecCtx, step: &Step) -> Result<StepResult, StepError> {
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
    let digest = content_digest(text.as_bytes());
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
            r.include = Some(match (secret, &inc.source) {
                (true, IncludeSource::Ref(refs)) if refs.secret_ref.is_some() => {
                    let key_ref = refs.secret_ref.as_ref().expect("checked");
                    IncludedDocument::SecretSteps {
                        name: key_ref.name.clone(),
                        key: key_ref.key.clone(),
                        sha256: digest,
                    }
                }
                _ => IncludedDocument::Steps {
                    steps,
                    vars: Default::default(),
                },
            });
            Ok(r)
        }
        Classified::Manifests(objs) => {
            let origin = match &inc.source {
                IncludeSource::Url(url) => url.clone(),
                IncludeSource::Ref(_) if secret => "the included Secret key".into(),
                IncludeSource::Ref(refs) => refs.config_map_ref.as_ref().map_or_else(
                    || "the included document".into(),
                    |r| format!("ConfigMap {} key {}", r.name, r.key),
                ),
            };
            let vars = crate::body::vars(&ctx.input.step);
            let objs = crate::body::substitute(objs, &vars, &origin, secret)?;
            let applied = apply::apply_objects(ctx, objs).await?;
            let mut r = StepResult::succeeded(applied.changed, apply::summary(&applied));
            r.include = Some(IncludedDocument::Manifests {
                applied: applied.objects,
            });
            Ok(r)
        }
    }
}
