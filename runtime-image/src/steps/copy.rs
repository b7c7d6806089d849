//! `copy`: reads a Secret or ConfigMap and server-side applies its data (all keys, or a renamed
//! selection) to each target, under the flow's ServiceAccount. The data lives only in this
//! process's memory between the read and the writes: the result and every note name keys and
//! objects, never a value.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::steps::copy::{CopyKind, CopyStep};
use serde_json::{json, Map, Value};

use crate::api;
use crate::context::ExecCtx;
use crate::error::{is_not_found, Call, StepError};

/// The field manager of copied objects.
const FIELD_MANAGER: &str = "pseudoflow-copy";
pub use super::copy_mark::COPIED_FROM;
use super::copy_mark::{self, COPIED_BY};

/// The data fields a kind keeps its keys in.
fn data_fields(kind: CopyKind) -> &'static [&'static str] {
    match kind {
        CopyKind::Secret => &["data"],
        CopyKind::ConfigMap => &["data", "binaryData"],
    }
}

fn resource(kind: CopyKind) -> ApiResource {
    match kind {
        CopyKind::Secret => ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        CopyKind::ConfigMap => ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    }
}

fn call<'a>(verb: &'a str, kind: CopyKind, name: &'a str, ns: &'a str) -> Call<'a> {
    Call {
        verb,
        resource: kind.plural(),
        name,
        namespace: Some(ns),
    }
}

/// Runs a `copy` step.
pub async fn run(ctx: &ExecCtx, step: &CopyStep) -> Result<StepResult, StepError> {
    let kind = step.from.kind;
    let ar = resource(kind);
    let src_ns = step.from.namespace.clone();
    let src_ns = src_ns.unwrap_or_else(|| ctx.namespace().to_string());
    let src_name = api::require_name("from.name", &step.from.name)?;
    let client = ctx.client().await?;
    let source: Api<DynamicObject> = Api::namespaced_with(client.clone(), &src_ns, &ar);
    let obj = match source.get(src_name).await {
        Ok(o) => o,
        Err(e) if is_not_found(&e) => {
            let msg = format!("{}: {kind:?} {src_ns}/{src_name} not found", ctx.input.path);
            return Err(StepError::failed(msg));
        }
        Err(e) => return Err(ctx.api_err(e, call("get", kind, src_name, &src_ns))),
    };
    let data = select(kind, &obj.data, step).map_err(|missing| {
        StepError::failed(format!(
            "{}: {kind:?} {src_ns}/{src_name} has no key {missing:?}",
            ctx.input.path
        ))
    })?;
    let keys = count_keys(&data);
    let source = format!("{src_ns}/{src_name}");
    let mark = copy_mark::mark(ctx);
    let mut changed = Vec::new();
    for t in &step.to {
        let name = t.name.as_deref().unwrap_or(src_name);
        api::require_name("to[].name", name)?;
        api::require_name("to[].namespace", &t.namespace)?;
        let mut body = json!({
            "apiVersion": "v1",
            "kind": format!("{kind:?}"),
            "metadata": {"name": name, "namespace": t.namespace,
                "annotations": {COPIED_FROM: source, COPIED_BY: mark}},
        });
        body.as_object_mut().unwrap().extend(data.clone());
        let target: Api<DynamicObject> = Api::namespaced_with(client.clone(), &t.namespace, &ar);
        let to = Target {
            api: &target,
            kind,
            name,
            namespace: &t.namespace,
        };
        let (before, after) = write_copy(ctx, &to, body, &mark, &source).await?;
        let same =
            before.is_some_and(|b| b.metadata.resource_version == after.metadata.resource_version);
        ctx.note(format!(
            "{kind:?} {}/{name}: {keys} key(s) written",
            t.namespace
        ));
        if !same {
            changed.push(format!("{}/{name}", t.namespace));
        }
    }
    let message = summary(step, keys, &source, changed.len());
    Ok(StepResult::succeeded(!changed.is_empty(), message))
}

/// One object a copy is written to.
struct Target<'a> {
    api: &'a Api<DynamicObject>,
    kind: CopyKind,
    name: &'a str,
    namespace: &'a str,
}

/// Writes `body` to `to`: created when missing (never applied over, so one made meanwhile by
/// someone else is not taken), applied over only a copy carrying this flow's `mark`, refused
/// otherwise naming whose it is. Returns the object before (if any) and after.
async fn write_copy(
    ctx: &ExecCtx,
    to: &Target<'_>,
    body: serde_json::Value,
    mark: &str,
    source: &str,
) -> Result<(Option<DynamicObject>, DynamicObject), StepError> {
    let (kind, name, ns) = (to.kind, to.name, to.namespace);
    let before = match to.api.get_opt(name).await {
        Ok(o) => o,
        Err(e) => return Err(ctx.api_err(e, call("get", kind, name, ns))),
    };
    let after = match &before {
        None => {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            let obj: DynamicObject = serde_json::from_value(body)
                .map_err(|e| StepError::failed(format!("{}: {e}", ctx.input.path)))?;
            to.api
                .create(&params, &obj)
                .await
                .map_err(|e| ctx.api_err(e, call("create", kind, name, ns)))?
        }
        Some(b) if copy_mark::is_ours(&b.metadata, mark, Some(source)) => {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            to.api
                .patch(name, &params, &Patch::Apply(&body))
                .await
                .map_err(|e| ctx.api_err(e, call("patch", kind, name, ns)))?
        }
        Some(b) => {
            return Err(StepError::failed(format!(
                "{}: {kind:?} {ns}/{name} is not this flow's copy ({}): not overwritten",
                ctx.input.path,
                copy_mark::owner(&b.metadata)
            )));
        }
    };
    Ok((before, after))
}

/// The step's message: which keys of `source` went to how many objects, how many changed.
fn summary(step: &CopyStep, keys: usize, source: &str, changed: usize) -> String {
    let kind = step.from.kind;
    let renamed: Vec<String> = step
        .keys
        .iter()
        .map(|k| match &k.r#as {
            Some(to) => format!("{}→{to}", k.key),
            None => k.key.clone(),
        })
        .collect();
    let which = if renamed.is_empty() {
        format!("{keys} key(s)")
    } else {
        format!("keys {}", renamed.join(", "))
    };
    format!(
        "copied {which} of {kind:?} {source} to {} object(s) ({changed} changed)",
        step.to.len()
    )
}

/// The data fields to write (`data`, `binaryData`, a Secret's `type`), with only the selected
/// keys, renamed; Err names a selected key the source does not have.
fn select(kind: CopyKind, src: &Value, step: &CopyStep) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for field in data_fields(kind) {
        let Some(all) = src.get(*field).and_then(Value::as_object) else {
            continue;
        };
        let picked: Map<String, Value> = if step.keys.is_empty() {
            all.clone()
        } else {
            step.keys
                .iter()
                .filter_map(|k| {
                    all.get(&k.key)
                        .map(|v| (k.target_key().to_string(), v.clone()))
                })
                .collect()
        };
        if !picked.is_empty() {
            out.insert(field.to_string(), Value::Object(picked));
        }
    }
    for k in &step.keys {
        let found = data_fields(kind)
            .iter()
            .any(|f| src.get(*f).and_then(|d| d.get(&k.key)).is_some());
        if !found {
            return Err(k.key.clone());
        }
    }
    if let Some(ty) = src.get("type").filter(|_| kind == CopyKind::Secret) {
        out.insert("type".into(), ty.clone());
    }
    Ok(out)
}

fn count_keys(data: &Map<String, Value>) -> usize {
    ["data", "binaryData"]
        .iter()
        .filter_map(|f| data.get(*f).and_then(Value::as_object))
        .map(Map::len)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(keys: Value) -> CopyStep {
        serde_json::from_value(json!({
            "from": {"kind": "Secret", "name": "db"}, "to": [{"namespace": "a"}], "keys": keys
        }))
        .unwrap()
    }

    #[test]
    fn selected_keys_are_renamed_and_the_rest_left_out() {
        let src = json!({"type": "Opaque", "data": {"user": "dQ==", "password": "cA==", "other": "eA=="}});
        let out = select(
            CopyKind::Secret,
            &src,
            &step(json!([{"key": "user", "as": "username"}, {"key": "password"}])),
        )
        .unwrap();
        assert_eq!(out["data"], json!({"username": "dQ==", "password": "cA=="}));
        assert_eq!(out["type"], "Opaque");
        assert_eq!(count_keys(&out), 2);
    }

    #[test]
    fn a_missing_key_is_named_without_any_value() {
        let src = json!({"data": {"user": "c2VjcmV0"}});
        let err = select(CopyKind::Secret, &src, &step(json!([{"key": "password"}]))).unwrap_err();
        assert_eq!(err, "password");
    }

    #[test]
    fn a_config_map_copies_binary_data_too() {
        let src = json!({"data": {"a": "1"}, "binaryData": {"b": "Ag=="}, "type": "ignored"});
        let out = select(CopyKind::ConfigMap, &src, &step(json!([]))).unwrap();
        assert_eq!(count_keys(&out), 2);
        assert!(out.get("type").is_none());
    }
}
