//! `apply`: server-side apply of inline manifests (text with several YAML documents, one object,
//! or a list of objects). Parsed at validation so a YAML typo fails before anything is applied.
//! With `subresource: status` (as `kubectl apply --subresource=status`), applied to the objects'
//! status subresource instead: how a bound flow records what its runs did in its own object
//! (`${object.status}` reads it back), with no pod.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Placement, PlanAs, Preview, StepParams};
use crate::check::Ctx;

/// Applies `manifests` with field manager `pseudoflow`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplyStep {
    /// Multi-document YAML text, one object, or a list of objects.
    #[schemars(schema_with = "manifests_schema")]
    pub manifests: Value,
    /// `status`: apply the manifests to each object's status subresource (as `kubectl apply
    /// --subresource=status`): only their `status` is written, to objects that exist, and the
    /// ServiceAccount needs `patch` on `<plural>/status`. Unset: the objects themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subresource: Option<Subresource>,
}

/// See [`ApplyStep::subresource`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::enum_schema::plain_enum)]
#[serde(rename_all = "camelCase")]
pub enum Subresource {
    /// The status subresource: `status` is written, nothing else.
    Status,
}

impl ApplyStep {
    /// Whether the step writes the objects' status subresource.
    pub fn to_status(&self) -> bool {
        self.subresource == Some(Subresource::Status)
    }
}

fn manifests_schema(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "anyOf": [{"type": "string"}, {"type": "object"}, {"type": "array"}],
        "x-kubernetes-preserve-unknown-fields": true
    })
}

impl StepParams for ApplyStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::Preview(Preview::Apply)
    }

    fn runs_in_controller(&self) -> bool {
        true
    }

    fn validate(&self, ctx: &mut Ctx) {
        match manifest_objects(&self.manifests) {
            Err(e) => ctx.error("manifests", e),
            Ok(objs) if objs.is_empty() => ctx.error("manifests", "contains no object"),
            Ok(objs) => {
                for (i, obj) in objs.iter().enumerate() {
                    check_object(ctx, &format!("manifests[{i}]"), obj);
                    if self.to_status() {
                        check_status_object(ctx, &format!("manifests[{i}]"), obj);
                    }
                }
            }
        }
    }
}

/// The objects in a manifests value: YAML documents split, empty documents dropped, `List`
/// kinds flattened, so the executor applies exactly what validation saw.
pub fn manifest_objects(manifests: &Value) -> Result<Vec<Value>, String> {
    let docs = match manifests {
        Value::String(text) => {
            let mut docs = Vec::new();
            for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
                let v = Value::deserialize(doc)
                    .map_err(|e| format!("YAML document {} is not valid: {e}", i + 1))?;
                if !v.is_null() {
                    docs.push(v);
                }
            }
            docs
        }
        Value::Array(items) => items.clone(),
        Value::Object(_) => vec![manifests.clone()],
        other => {
            return Err(format!(
                "expected YAML text, an object or a list, got {other}"
            ))
        }
    };
    let mut out = Vec::new();
    for d in docs {
        let is_list = d
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"));
        match d.get("items").and_then(Value::as_array) {
            Some(items) if is_list => out.extend(items.iter().cloned()),
            _ => out.push(d),
        }
    }
    Ok(out)
}

/// A status is applied to an object that exists, by name, and is its `status`: a manifest with
/// `generateName` (creating) or without `status` would write nothing.
fn check_status_object(ctx: &mut Ctx, field: &str, obj: &Value) {
    if !obj.is_object() {
        return;
    }
    if obj.pointer("/metadata/name").is_none() && obj.pointer("/metadata/generateName").is_some() {
        ctx.error(
            field,
            "subresource: status applies to an existing object: it needs metadata.name, not generateName",
        );
    }
    if obj.get("status").is_none() {
        ctx.error(field, "subresource: status writes the manifest's status, and it has none");
    }
}

/// Every manifest object needs apiVersion, kind and metadata.name to be applied.
pub fn check_object(ctx: &mut Ctx, field: &str, obj: &Value) {
    if !obj.is_object() {
        ctx.error(field, "each manifest must be an object");
        return;
    }
    for key in ["apiVersion", "kind"] {
        if !obj.get(key).is_some_and(Value::is_string) {
            ctx.error(field, format!("manifest has no {key}"));
        }
    }
    let name = obj
        .pointer("/metadata/name")
        .or_else(|| obj.pointer("/metadata/generateName"));
    if !name.is_some_and(Value::is_string) {
        ctx.error(field, "manifest has no metadata.name");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::Diagnostics;
    use serde_json::json;

    /// Every error of a flow with `step` as its only step, as `path: message`.
    fn errors(step: Value) -> Vec<String> {
        let spec = json!({"steps": [step]});
        let (_, diags) = crate::validate::validate_spec(&spec);
        let mut out: Vec<String> = diags
            .errors()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect();
        out.sort();
        out
    }

    fn status_of(name: Value) -> Value {
        json!({"type": "apply", "subresource": "status", "manifests": {
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": name,
            "status": {"copiedTo": ["a"]}}})
    }

    #[test]
    fn the_status_subresource_is_accepted_and_any_other_refused_naming_the_field() {
        assert!(errors(status_of(json!({"name": "w"}))).is_empty());
        let mut spec = status_of(json!({"name": "w"}));
        spec["subresource"] = json!("spec");
        let e = errors(spec);
        assert!(
            e.iter()
                .any(|e| e.starts_with("spec.steps[0].subresource: ") && e.contains("status")),
            "{e:?}"
        );
        let step: ApplyStep =
            serde_json::from_value(status_of(json!({"name": "w"}))).unwrap();
        assert!(step.to_status());
        let plain: ApplyStep = serde_json::from_value(json!({"manifests": {}})).unwrap();
        assert!(!plain.to_status() && plain.runs_in_controller());
    }

    #[test]
    fn a_status_needs_an_existing_objects_name_and_a_status_to_write() {
        let e = errors(status_of(json!({"generateName": "w-"})));
        assert!(
            e.iter().any(|e| e.starts_with("spec.steps[0].manifests[0]: ")
                && e.contains("not generateName")),
            "{e:?}"
        );
        let mut none = status_of(json!({"name": "w"}));
        none["manifests"].as_object_mut().unwrap().remove("status");
        let e = errors(none);
        assert!(
            e.iter().any(|e| e.contains("it has none")),
            "{e:?}"
        );
    }

    #[test]
    fn a_status_step_is_an_api_step_safe_to_repeat_in_the_controller() {
        let step: ApplyStep = serde_json::from_value(status_of(json!({"name": "w"}))).unwrap();
        assert_eq!(step.placement(false), Placement::Api);
        assert!(step.runs_in_controller());
        let mut diags = Diagnostics::default();
        step.validate(&mut Ctx::new("spec.steps[0]", &mut diags));
        assert!(!diags.has_errors());
    }
}
