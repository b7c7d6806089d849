//! Each step type's own schema, generated from its parameter struct plus the common fields
//! ([`step_schemas`]), and their merge into the one step schema the CRD carries
//! ([`union_step_schema`]). A module of its own, next to the registry it reads, so the `Step`
//! type's schema does not depend on the validator or the CRD generator that use it.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use schemars::Schema;
use serde_json::{json, Value};

use crate::steps::registry::{params_schema, STEP_TYPES};

pub(crate) const STEP_MARK: &str = "x-pseudoflow-step";
pub(crate) const NESTED_MARK: &str = "x-pseudoflow-steps";

fn common_properties() -> Value {
    json!({
        "type": {"type": "string", "enum": STEP_TYPES},
        "name": {"type": "string", "description": "Shown in status and Events instead of the step's path."},
        "continueOnError": {"type": "boolean", "description": "Record a failure of this step and go on."},
        "timeoutSeconds": {
            "type": "integer",
            "minimum": 1,
            "maximum": crate::limits::MAX_DURATION_SECONDS,
            "description": "Fail the step after this long (at most 7 days). On loop, loopNodes, parallel, retry and includeFlow: the whole body, every retry attempt included."
        },
        "isolate": {"type": "boolean", "description": "Run this step in an executor Job of its own, not fused with the steps next to it."}
    })
}

/// Each step type's full schema (its parameters plus the common fields), built once.
pub fn step_schemas() -> &'static BTreeMap<&'static str, Value> {
    static SCHEMAS: OnceLock<BTreeMap<&'static str, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        STEP_TYPES
            .iter()
            .map(|tag| {
                let mut schema = params_schema(tag).expect("registered").to_value();
                let obj = schema.as_object_mut().expect("object schema");
                let props = obj.entry("properties").or_insert_with(|| json!({}));
                for (k, v) in common_properties().as_object().unwrap() {
                    props.as_object_mut().unwrap().insert(k.clone(), v.clone());
                }
                let req = obj.entry("required").or_insert_with(|| json!([]));
                req.as_array_mut().unwrap().insert(0, json!("type"));
                if matches!(*tag, "includeFlow" | "approval") {
                    // The original DSL names the included flow with the common `name` field;
                    // the approve annotation names an approval step by it.
                    req.as_array_mut().unwrap().push(json!("name"));
                }
                (*tag, schema)
            })
            .collect()
    })
}

/// The merged step schema for the CRD: the union of all step types' properties (a property
/// whose shape differs between types is left open), the `type` enum, and one CEL rule per type
/// requiring that type's fields.
pub fn union_step_schema() -> Schema {
    let mut props: BTreeMap<String, Value> = BTreeMap::new();
    let mut required_by_type: Vec<(&str, Vec<String>)> = Vec::new();
    for (tag, schema) in step_schemas() {
        for (name, prop) in schema["properties"].as_object().unwrap() {
            let prop = normalize(strip_descriptions(prop.clone()));
            let merged = match props.remove(name) {
                Some(existing) => merge(existing, prop),
                None => prop,
            };
            props.insert(name.clone(), merged);
        }
        let required: Vec<String> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|r| *r != "type")
            .map(str::to_string)
            .collect();
        required_by_type.push((tag, required));
    }
    // CEL can only test the presence of fields with a declared type; the others are checked by
    // the compiler (the flow then fails with reason InvalidSpec before anything runs).
    let mut rules = Vec::new();
    for (tag, required) in required_by_type {
        let typed: Vec<&String> = required
            .iter()
            .filter(|r| props.get(*r).is_some_and(fully_typed))
            .collect();
        if typed.is_empty() {
            continue;
        }
        let has: Vec<String> = typed.iter().map(|r| format!("has(self.{r})")).collect();
        let names: Vec<&str> = typed.iter().map(|s| s.as_str()).collect();
        rules.push(json!({
            "rule": format!("self.type != '{tag}' || ({})", has.join(" && ")),
            "message": format!("{tag} steps need {}", names.join(", ")),
        }));
    }
    let shallow = shallow_step_schema(&props);
    for (name, kind) in STEP_TYPES.iter().flat_map(|t| nested_fields(t)) {
        // `steps` also holds `parallel`'s branches (lists of lists), so its items stay open.
        if kind == "list" && name != "steps" {
            if let Some(list) = props.get_mut(&name) {
                list["items"] = shallow.clone();
            }
        }
    }
    // No rule can bound `forEach` (a list or an expression, so free-form): the API server
    // refuses CEL on a field without a declared type ("undefined field 'forEach'"). Its items
    // and depth are the compiler's to check (see crate::depth).
    let schema = json!({
        "type": "object",
        "description": "One step; `type` selects which other fields apply (see docs/steps.md).",
        "required": ["type"],
        "properties": props,
        "x-kubernetes-validations": rules,
        STEP_MARK: true,
    });
    Schema::try_from(schema).expect("object schema")
}

/// The schema of a step nested in `then`/`else`: its `type` required and from the enum, and
/// every scalar field the union types (enums such as `runOn`, `op`, `condition`; bounds such as
/// `timeoutSeconds`) checked as at the top level, the rest kept open. A structural schema cannot
/// recurse and a full copy per level would multiply the CRD's size; per-type required fields
/// would need CEL, whose estimated cost over two nested lists of 10,000 exceeds the API
/// server's budget. The admission webhook checks everything else, at any depth.
fn shallow_step_schema(props: &BTreeMap<String, Value>) -> Value {
    let leaf = |v: &Value| {
        let scalar = |v: &Value| {
            matches!(
                v.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "boolean" | "number")
            )
        };
        scalar(v) || (v["type"] == "array" && v.get("items").is_some_and(scalar))
    };
    let typed: serde_json::Map<String, Value> = props
        .iter()
        .filter(|(_, v)| leaf(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    json!({
        "type": "object",
        "required": ["type"],
        "properties": typed,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Whether CEL can see a field: it and everything inside it has a declared type, except that
/// an object's property may be open (`x-kubernetes-preserve-unknown-fields`, e.g.
/// `target.selector`, a string or an object): CEL types the object by its declared properties
/// and the open one as dynamic, so `has(self.target)` still compiles (proven on the API server
/// by `crd/tests/crd_on_apiserver.rs`).
fn fully_typed(schema: &Value) -> bool {
    if schema.get("type").is_none() {
        return false;
    }
    let open = |v: &Value| v.get("x-kubernetes-preserve-unknown-fields").is_some();
    let items_ok = schema.get("items").is_none_or(fully_typed);
    let props_ok = schema
        .get("properties")
        .and_then(Value::as_object)
        .is_none_or(|p| p.values().all(|v| fully_typed(v) || open(v)));
    items_ok && props_ok
}

/// A property as the CRD will see it (open unions already collapsed), without `nullable`:
/// every step field is optional at the union level anyway.
fn normalize(v: Value) -> Value {
    let mut v = to_structural(v);
    if let Some(o) = v.as_object_mut() {
        o.remove("nullable");
    }
    v
}

/// One schema accepting what either accepts, keeping as much type information as possible:
/// objects merge their properties, arrays their items, strings drop differing enums; anything
/// else becomes open (`x-kubernetes-preserve-unknown-fields`).
fn merge(a: Value, b: Value) -> Value {
    if a == b {
        return a;
    }
    let ty = |v: &Value| v.get("type").and_then(Value::as_str).map(str::to_string);
    match (ty(&a), ty(&b)) {
        (Some(ta), Some(tb))
            if ta == tb
                && ta == "object"
                && a.get("properties").is_some()
                && b.get("properties").is_some() =>
        {
            let mut props = a["properties"].as_object().cloned().unwrap_or_default();
            for (k, v) in b["properties"].as_object().cloned().unwrap_or_default() {
                let merged = match props.remove(&k) {
                    Some(existing) => merge(existing, v),
                    None => v,
                };
                props.insert(k, merged);
            }
            json!({"type": "object", "properties": props})
        }
        (Some(ta), Some(tb)) if ta == tb && ta == "array" => {
            let items = merge(
                a.get("items").cloned().unwrap_or(json!({})),
                b.get("items").cloned().unwrap_or(json!({})),
            );
            let mut out = json!({"type": "array", "items": items});
            if let Some(max) = loosest_bound(&a, &b, "maxItems") {
                out["maxItems"] = max;
            }
            out
        }
        (Some(ta), Some(tb)) if ta == tb && ta != "object" => {
            let mut out = json!({"type": ta});
            for key in ["minimum", "maximum"] {
                if let Some(bound) = loosest_bound(&a, &b, key) {
                    out[key] = bound;
                }
            }
            out
        }
        _ => {
            json!({"x-kubernetes-preserve-unknown-fields": true, "description": "Shape depends on the step type."})
        }
    }
}

/// The looser of two schemas' `minimum` (the smaller) or `maximum` (the larger), when both have
/// one: the merged CRD field accepts what either step type does, and the validator checks each
/// type's own bound.
fn loosest_bound(a: &Value, b: &Value, key: &str) -> Option<Value> {
    let (x, y) = (a.get(key)?, b.get(key)?);
    let (fx, fy) = (x.as_f64()?, y.as_f64()?);
    let x_looser = if key == "minimum" { fx <= fy } else { fx >= fy }; // maximum, maxItems
    Some(if x_looser { x.clone() } else { y.clone() })
}

/// Drops descriptions and defaults from a step type's property before merging: a `default` in
/// the merged schema would make the API server add that field to *every* step type (structural
/// defaulting), e.g. `waitForAll: true` on an `apply`; serde applies each type's defaults instead.
fn strip_descriptions(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("description");
        o.remove("default");
        for child in o.values_mut() {
            *child = strip_descriptions(child.take());
        }
    } else if let Some(a) = v.as_array_mut() {
        for child in a {
            *child = strip_descriptions(child.take());
        }
    }
    v
}

/// Makes a generated schema acceptable to the API server as a structural schema: open
/// `anyOf` fields become `x-kubernetes-preserve-unknown-fields`, `const`/`oneOf` of constants
/// become `enum`, and the validator's private markers are dropped.
pub fn to_structural(v: Value) -> Value {
    let Value::Object(mut o) = v else {
        return match v {
            Value::Array(a) => Value::Array(a.into_iter().map(to_structural).collect()),
            other => other,
        };
    };
    o.retain(|k, _| !k.starts_with("x-pseudoflow"));
    if o.contains_key("anyOf") {
        o.remove("anyOf");
        o.remove("type");
        o.insert(
            "x-kubernetes-preserve-unknown-fields".into(),
            Value::Bool(true),
        );
    }
    if let Some(values) = allowed_values(&Value::Object(o.clone())) {
        if o.contains_key("oneOf") || o.contains_key("const") {
            o.remove("oneOf");
            o.remove("const");
            let ty = if values.iter().all(Value::is_string) {
                "string"
            } else {
                "integer"
            };
            o.insert("type".into(), json!(ty));
            o.insert("enum".into(), Value::Array(values));
        }
    }
    for key in ["format"] {
        if o.get(key).and_then(Value::as_str).is_some_and(|f| {
            f.starts_with("uint") || f.starts_with("int") && f != "int32" && f != "int64"
        }) {
            o.remove(key);
        }
    }
    if o.get("nullable") == Some(&Value::Bool(true))
        && o.contains_key("x-kubernetes-preserve-unknown-fields")
    {
        o.remove("nullable");
    }
    Value::Object(o.into_iter().map(|(k, v)| (k, to_structural(v))).collect())
}

/// The values an enum schema allows (`enum`, or a `const`), if it is one: what the checker
/// lists in its message and the CRD keeps as `enum`.
pub(crate) fn allowed_values(schema: &Value) -> Option<Vec<Value>> {
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        return Some(e.clone());
    }
    if let Some(c) = schema.get("const") {
        return Some(vec![c.clone()]);
    }
    let one_of = schema.get("oneOf")?.as_array()?;
    let mut out = Vec::new();
    for o in one_of {
        out.extend(allowed_values(o)?);
    }
    Some(out)
}

/// The fields of a step type that hold nested step lists, from its schema's markers.
pub(crate) fn nested_fields(ty: &str) -> Vec<(String, &'static str)> {
    let Some(schema) = step_schemas().get(ty) else {
        return vec![];
    };
    schema["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .filter_map(
                    |(k, v)| match v.get("x-pseudoflow-steps").and_then(Value::as_str) {
                        Some("list") => Some((k.clone(), "list")),
                        Some("branches") => Some((k.clone(), "branches")),
                        _ => None,
                    },
                )
                .collect()
        })
        .unwrap_or_default()
}

/// Nested raw step lists of a step, with their field paths (`then`, `steps[1]`).
pub(crate) fn nested_lists<'v>(ty: &str, raw: &'v Value) -> Vec<(String, &'v [Value])> {
    let mut out = Vec::new();
    for (field, kind) in nested_fields(ty) {
        let Some(list) = raw.get(&field).and_then(Value::as_array) else {
            continue;
        };
        if kind == "branches" {
            for (b, branch) in list.iter().enumerate() {
                if let Some(steps) = branch.as_array() {
                    out.push((format!("{field}[{b}]"), steps.as_slice()));
                }
            }
        } else {
            out.push((field.clone(), list.as_slice()));
        }
    }
    out
}
