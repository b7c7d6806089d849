//! `setLabel`, `removeLabel`, `patchLabel`: merge patches of `metadata.labels` on one object
//! (by name) or every object a selector matches. Objects whose labels already are as wanted
//! are not patched, so `changed` is true only when something changed.

use std::collections::BTreeMap;

use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use pseudoflow_crd::common::Target;
use pseudoflow_crd::protocol::StepResult;
use serde_json::{json, Map, Value};

use crate::api;
use crate::context::ExecCtx;
use crate::error::StepError;

/// Wanted label values: Some = set, None = remove.
pub type LabelChange = BTreeMap<String, Option<String>>;

/// Runs `setLabel`.
pub async fn set(
    ctx: &ExecCtx,
    target: &Target,
    labels: &BTreeMap<String, String>,
) -> Result<StepResult, StepError> {
    let change: LabelChange = labels
        .iter()
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect();
    relabel(ctx, target, |_| Some(change.clone())).await
}

/// Runs `removeLabel`.
pub async fn remove(
    ctx: &ExecCtx,
    target: &Target,
    keys: &[String],
) -> Result<StepResult, StepError> {
    let change: LabelChange = keys.iter().map(|k| (k.clone(), None)).collect();
    relabel(ctx, target, |_| Some(change.clone())).await
}

/// Runs `patchLabel`: `from_var_value` is the variable's value, `{"<name>": {"k": "v"}}` (an
/// object, or JSON text holding one); a null value removes that label.
pub async fn patch(
    ctx: &ExecCtx,
    target: &Target,
    from_var_value: Option<&Value>,
) -> Result<StepResult, StepError> {
    let per_object = per_object_labels(from_var_value)?;
    relabel(ctx, target, |name| per_object.get(name).cloned()).await
}

/// Parses the per-object label map of `patchLabel`.
pub fn per_object_labels(v: Option<&Value>) -> Result<BTreeMap<String, LabelChange>, StepError> {
    let parsed;
    let v = match v {
        None => {
            return Err(StepError::input(
                "patchLabel: the controller passed no fromVarValue",
            ))
        }
        Some(Value::String(text)) => {
            parsed = serde_json::from_str::<Value>(text).map_err(|e| {
                StepError::failed(format!(
                    "patchLabel: the variable is not a JSON object: {e}"
                ))
            })?;
            &parsed
        }
        Some(v) => v,
    };
    let obj = v.as_object().ok_or_else(|| {
        StepError::failed("patchLabel: the variable must map object names to label maps")
    })?;
    let mut out = BTreeMap::new();
    for (name, labels) in obj {
        let labels = labels.as_object().ok_or_else(|| {
            StepError::failed(format!("patchLabel: labels for {name:?} must be a map"))
        })?;
        let change = labels
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone()),
                    other => Some(other.to_string()),
                };
                (k.clone(), v)
            })
            .collect();
        out.insert(name.clone(), change);
    }
    Ok(out)
}

/// The merge patch that brings `current` labels to `change`; None when nothing would change.
pub fn label_patch(current: &BTreeMap<String, String>, change: &LabelChange) -> Option<Value> {
    let mut patch = Map::new();
    for (k, want) in change {
        if current.get(k) != want.as_ref() {
            patch.insert(k.clone(), want.clone().map_or(Value::Null, Value::String));
        }
    }
    (!patch.is_empty()).then(|| json!({"metadata": {"labels": patch}}))
}

async fn relabel<F>(ctx: &ExecCtx, target: &Target, change_for: F) -> Result<StepResult, StepError>
where
    F: Fn(&str) -> Option<LabelChange>,
{
    let api_version = api::api_version_for(target.api_version.as_deref(), &target.kind)?;
    let r = api::resolve(ctx, &api_version, &target.kind).await?;
    let ns = api::namespace_for(ctx, &r, target.namespace.as_deref());
    let api = api::api_for(ctx, &r, ns.as_deref()).await?;
    let objects: Vec<DynamicObject> = match (&target.name, &target.selector) {
        (Some(name), _) => match api::get_opt(
            ctx,
            &api,
            &r,
            api::require_name("target.name", name)?,
            ns.as_deref(),
        )
        .await?
        {
            Some(o) => vec![o],
            None => {
                return Err(StepError::failed(format!(
                    "{} not found",
                    api::display(&target.kind, ns.as_deref(), name)
                )))
            }
        },
        (None, sel) => {
            let sel = sel
                .clone()
                .unwrap_or_default()
                .parse()
                .map_err(|e| StepError::failed(format!("target.selector: {e}")))?;
            let lp = ListParams::default().labels(&sel.to_string());
            api.list(&lp)
                .await
                .map_err(|e| ctx.api_err(e, api::call("list", &r, "", ns.as_deref())))?
                .items
        }
    };
    let mut changed = Vec::new();
    let mut considered = 0;
    for obj in &objects {
        let name = obj.metadata.name.clone().unwrap_or_default();
        let Some(change) = change_for(&name) else {
            continue;
        };
        considered += 1;
        let current = obj.metadata.labels.clone().unwrap_or_default();
        let Some(p) = label_patch(&current, &change) else {
            continue;
        };
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&p))
            .await
            .map_err(|e| ctx.api_err(e, api::call("patch", &r, &name, ns.as_deref())))?;
        changed.push(name);
    }
    let msg = format!(
        "relabelled {} of {considered} {} {}",
        changed.len(),
        target.kind,
        changed.join(", ")
    );
    Ok(StepResult::succeeded(
        !changed.is_empty(),
        msg.trim_end().to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn patches_only_what_differs() {
        let cur = labels(&[("a", "1"), ("b", "2")]);
        let mut change = LabelChange::new();
        change.insert("a".into(), Some("1".into()));
        assert_eq!(label_patch(&cur, &change), None);
        change.insert("b".into(), None);
        change.insert("c".into(), None);
        assert_eq!(
            label_patch(&cur, &change),
            Some(json!({"metadata": {"labels": {"b": null}}}))
        );
    }

    #[test]
    fn patch_label_values_come_as_objects_or_json_text() {
        let v = json!({"n1": {"zone": "a", "old": null}});
        let m = per_object_labels(Some(&v)).unwrap();
        assert_eq!(m["n1"]["zone"], Some("a".into()));
        assert_eq!(m["n1"]["old"], None);
        let text = Value::String(v.to_string());
        assert_eq!(per_object_labels(Some(&text)).unwrap(), m);
        assert!(per_object_labels(Some(&json!([1]))).is_err());
        assert!(matches!(per_object_labels(None), Err(StepError::Input(_))));
    }
}
