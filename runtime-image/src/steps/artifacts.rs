//! `applyFile` and API-context `deleteFile`: a manifest file from the flow's artifacts
//! (ConfigMaps whose keys are file names, or http(s) base URLs, searched in order), applied or
//! deleted object by object, `${...}` substituted inside the parsed values. Paths that could
//! escape the artifact root are refused.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::steps::apply::manifest_objects;
use serde_json::Value;

use crate::context::ExecCtx;
use crate::error::{is_not_found, Call, StepError};
use crate::steps::{apply, delete};

/// Refuses empty, absolute and `..` paths: artifacts are relative to their source.
pub fn check_path(path: &str) -> Result<(), StepError> {
    if path.trim().is_empty() {
        return Err(StepError::failed("artifact path is empty"));
    }
    if path.starts_with('/') {
        return Err(StepError::failed(format!(
            "artifact path {path:?} is absolute"
        )));
    }
    if path.split(['/', '\\']).any(|c| c == "..") {
        return Err(StepError::failed(format!(
            "artifact path {path:?} escapes the artifact root"
        )));
    }
    Ok(())
}

/// The ConfigMap keys tried for a path: the path itself, then its file name (keys cannot hold
/// `/`).
pub fn config_map_keys(path: &str) -> Vec<&str> {
    let mut keys = vec![path];
    if let Some((_, base)) = path.rsplit_once('/') {
        keys.push(base);
    }
    keys
}

/// Reads an artifact file; the error lists where it was looked for.
pub async fn fetch(ctx: &ExecCtx, path: &str) -> Result<String, StepError> {
    check_path(path)?;
    // A flow without spec.artifacts reads the default ConfigMap (see docs/decisions.md).
    let default = [pseudoflow_crd::ArtifactSource {
        config_map: Some(pseudoflow_crd::spec::DEFAULT_ARTIFACTS_CONFIGMAP.into()),
        url: None,
    }];
    let sources: &[pseudoflow_crd::ArtifactSource] = if ctx.input.artifacts.is_empty() {
        &default
    } else {
        &ctx.input.artifacts
    };
    let mut tried = Vec::new();
    for src in sources {
        if let Some(cm) = &src.config_map {
            let ns = ctx.namespace();
            let api: Api<ConfigMap> = Api::namespaced(ctx.client().await?, ns);
            let call = Call {
                verb: "get",
                resource: "configmaps",
                name: cm,
                namespace: Some(ns),
            };
            match api.get(cm).await {
                Ok(found) => {
                    let data = found.data.unwrap_or_default();
                    if let Some(text) = config_map_keys(path).into_iter().find_map(|k| data.get(k))
                    {
                        return Ok(text.clone());
                    }
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(ctx.api_err(e, call)),
            }
            tried.push(format!("ConfigMap {cm}"));
        }
        if let Some(url) = &src.url {
            let full = format!("{}/{}", url.trim_end_matches('/'), path);
            if let Some(text) = crate::http::fetch_text(&full).await? {
                return Ok(text);
            }
            tried.push(full);
        }
    }
    Err(StepError::failed(format!(
        "artifact {path:?} not found in {}",
        tried.join(", ")
    )))
}

/// The file's objects, `${...}` substituted inside their string values (crate::body).
fn objects(ctx: &ExecCtx, text: String, path: &str) -> Result<Vec<Value>, StepError> {
    let objs = manifest_objects(&Value::String(text))
        .map_err(|e| StepError::failed(format!("{path}: {e}")))?;
    crate::body::substitute(objs, &crate::body::vars(&ctx.input.step), path, false)
}

/// Runs `applyFile`.
pub async fn apply_file(ctx: &ExecCtx, path: &str) -> Result<StepResult, StepError> {
    let objs = objects(ctx, fetch(ctx, path).await?, path)?;
    let applied = apply::apply_objects(ctx, objs).await?;
    Ok(StepResult::succeeded(
        applied.changed,
        format!("{path}: {}", apply::summary(&applied)),
    ))
}

/// Runs API-context `deleteFile`: deletes the file's objects in reverse order.
pub async fn delete_file(ctx: &ExecCtx, path: &str) -> Result<StepResult, StepError> {
    let objs = objects(ctx, fetch(ctx, path).await?, path)?;
    let mut deleted = Vec::new();
    for obj in objs.iter().rev() {
        let s = |p: &str| obj.pointer(p).and_then(Value::as_str);
        let (Some(av), Some(kind), Some(name)) =
            (s("/apiVersion"), s("/kind"), s("/metadata/name"))
        else {
            continue;
        };
        if let Some(l) =
            delete::delete_object(ctx, av, kind, name, s("/metadata/namespace")).await?
        {
            deleted.push(l);
        }
    }
    let changed = !deleted.is_empty();
    Ok(StepResult::succeeded(
        changed,
        format!(
            "{path}: deleted {} of {} objects {}",
            deleted.len(),
            objs.len(),
            deleted.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_stay_inside_the_artifact_root() {
        assert!(check_path("dns/nodelocaldns.yaml").is_ok());
        assert!(check_path("/etc/passwd").is_err());
        assert!(check_path("../secret.yaml").is_err());
        assert!(check_path("a/../../b").is_err());
        assert!(check_path("").is_err());
        assert_eq!(config_map_keys("dns/x.yaml"), vec!["dns/x.yaml", "x.yaml"]);
    }
}
