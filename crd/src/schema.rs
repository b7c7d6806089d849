//! Schemas generated from the step types, used twice:
//! - by the structural validator, which walks a raw flow against each step type's own schema
//!   (reporting every type mismatch, missing and unknown field with its path), and
//! - for the CRD, where all step types are merged into one structural object schema with CEL
//!   rules for each type's required fields, so `kubectl apply` rejects what OpenAPI can express.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kube::CustomResourceExt;
use schemars::{generate::SchemaSettings, Schema};
use serde_json::{json, Map, Value};

use crate::diagnostics::Diagnostics;
use crate::spec::PseudoFlow;
use crate::steps::registry::{params_schema, STEP_TYPES};
use crate::text::{join, suggest};

/// A path into the flow as a chain of borrowed segments: walking allocates nothing, and the
/// `spec.steps[3].cmd` text is only built when a problem is reported.
#[derive(Clone, Copy)]
pub struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
}

#[derive(Clone, Copy)]
enum Seg<'a> {
    Root(&'a str),
    Key(&'a str),
    Index(usize),
}

impl<'a> Path<'a> {
    /// A path starting at `root` (e.g. `spec`).
    pub fn root(root: &'a str) -> Self {
        Path {
            parent: None,
            seg: Seg::Root(root),
        }
    }

    fn key(&'a self, key: &'a str) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Key(key),
        }
    }

    fn index(&'a self, i: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Index(i),
        }
    }

    /// The dotted text of the path.
    pub fn render(&self) -> String {
        let mut out = self.parent.map(|p| p.render()).unwrap_or_default();
        match self.seg {
            Seg::Root(r) => out.push_str(r),
            Seg::Key(k) => out = join(&out, k),
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
        out
    }
}

const STEP_MARK: &str = "x-pseudoflow-step";
const NESTED_MARK: &str = "x-pseudoflow-steps";

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
                if *tag == "includeFlow" {
                    // The original DSL names the included flow with the common `name` field.
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

/// Walks a raw `spec` against the generated schema, descending into every nested step list.
pub fn check_spec_structure(raw: &Value, path: &str, diags: &mut Diagnostics) {
    static SPEC: OnceLock<Value> = OnceLock::new();
    let schema = SPEC.get_or_init(|| {
        let settings = SchemaSettings::openapi3().with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        });
        settings
            .into_generator()
            .into_root_schema_for::<crate::spec::PseudoFlowSpec>()
            .to_value()
    });
    check(raw, schema, &Path::root(path), diags);
}

/// Structural check of one step: its `type` first, then its type's own schema.
pub fn check_step(value: &Value, path: &Path, diags: &mut Diagnostics) {
    let Some(obj) = value.as_object() else {
        diags.error(
            path.render(),
            format!(
                "expected a step (an object with a type), got {}",
                describe(value)
            ),
        );
        return;
    };
    let ty = match obj.get("type") {
        None => {
            diags.error(path.render(), "missing required field \"type\"");
            return;
        }
        Some(Value::String(t)) => t,
        Some(other) => {
            diags.error(
                path.key("type").render(),
                format!("expected string, got {}", describe(other)),
            );
            return;
        }
    };
    match step_schemas().get(ty.as_str()) {
        Some(schema) => check(value, schema, path, diags),
        None => {
            let hint = suggest(ty, STEP_TYPES.iter().copied())
                .map(|s| format!(" (did you mean {s:?}?)"))
                .unwrap_or_default();
            diags.error(
                path.key("type").render(),
                format!("unknown step type {ty:?}{hint}"),
            );
        }
    }
}

fn check(value: &Value, schema: &Value, path: &Path, diags: &mut Diagnostics) {
    if schema.get(STEP_MARK).is_some() {
        return check_step(value, path, diags);
    }
    match schema.get(NESTED_MARK).and_then(Value::as_str) {
        Some("list") => return check_step_list(value, path, diags),
        Some("branches") => return check_branches(value, path, diags),
        _ => {}
    }
    if value.is_null() && schema.get("nullable") == Some(&Value::Bool(true)) {
        return;
    }
    if let Some(options) = schema.get("anyOf").and_then(Value::as_array) {
        return check_any_of(value, options, path, diags);
    }
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        if !type_matches(t, value) {
            diags.error(
                path.render(),
                format!("expected {}, got {}", type_word(t), describe(value)),
            );
            return;
        }
    }
    if let Some(message) = not_allowed(schema, value) {
        diags.error(path.render(), message);
        return;
    }
    if let Some(message) = out_of_range(schema, value) {
        diags.error(path.render(), message);
    }
    match value {
        Value::Object(obj) => check_object(obj, schema, path, diags),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item, item_schema, &path.index(i), diags);
                }
            }
        }
        _ => {}
    }
}

/// `parallel`'s branches: a list of step lists.
fn check_branches(value: &Value, path: &Path, diags: &mut Diagnostics) {
    let Some(branches) = value.as_array() else {
        diags.error(
            path.render(),
            format!(
                "expected a list of branches (each a list of steps), got {}",
                describe(value)
            ),
        );
        return;
    };
    for (i, b) in branches.iter().enumerate() {
        if !b.is_array() {
            diags.error(path.index(i).render(), format!("expected a branch (a list of steps), got {}; write each branch as `- - type: ...`", describe(b)));
        } else {
            check_step_list(b, &path.index(i), diags);
        }
    }
}

/// Why a value is not one the schema's enum allows, listing them (with a "did you mean" for a
/// near typo); `None` when it is allowed or the schema has no enum.
fn not_allowed(schema: &Value, value: &Value) -> Option<String> {
    if value_allowed(schema, value) {
        return None;
    }
    let names: Vec<String> = allowed_values(schema)?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())
        })
        .collect();
    let hint = value
        .as_str()
        .and_then(|s| suggest(s, names.iter().map(String::as_str)))
        .map(|s| format!(" (did you mean {s:?}?)"))
        .unwrap_or_default();
    Some(format!(
        "{} is not one of: {}{hint}",
        describe(value),
        names.join(", ")
    ))
}

/// Why a number is outside the schema's `minimum`/`maximum`, naming both bounds when there are
/// two; `None` when it is inside (or not a number).
fn out_of_range(schema: &Value, value: &Value) -> Option<String> {
    let n = value.as_f64()?;
    let bound = |key| schema.get(key).and_then(Value::as_f64);
    let (min, max) = (bound("minimum"), bound("maximum"));
    if !(min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m)) {
        return None;
    }
    // Schemas write bounds as floats (`1.0`); people write `1`.
    let text = |b: f64| format!("{}", b as i64);
    Some(match (min, max) {
        (Some(min), Some(max)) => format!(
            "must be between {} and {}, got {value}",
            text(min),
            text(max)
        ),
        (Some(min), None) => format!("must be at least {}, got {value}", text(min)),
        (None, max) => format!(
            "must be at most {}, got {value}",
            text(max.unwrap_or_default())
        ),
    })
}

/// A value valid against any branch is fine; otherwise report the errors of the branch whose
/// type matches (e.g. the enum's message for a misspelt `runOn`), or the expected types.
fn check_any_of(value: &Value, options: &[Value], path: &Path, diags: &mut Diagnostics) {
    let options: Vec<&Value> = options
        .iter()
        .filter(|o| o.get("type").and_then(Value::as_str) != Some("null"))
        .collect();
    if value.is_null() {
        return;
    }
    let mut best: Option<Diagnostics> = None;
    for opt in &options {
        let mut trial = Diagnostics::default();
        check(value, opt, path, &mut trial);
        if !trial.has_errors() {
            return;
        }
        if branch_type(opt).is_none_or(|t| type_matches(t, value)) && best.is_none() {
            best = Some(trial);
        }
    }
    match best {
        Some(errors) => diags.extend(errors),
        None => {
            let types: Vec<&str> = options
                .iter()
                .filter_map(|o| branch_type(o))
                .map(type_word)
                .collect();
            diags.error(
                path.render(),
                format!("expected {}, got {}", types.join(" or "), describe(value)),
            );
        }
    }
}

/// The JSON type a schema branch accepts, looking through `oneOf` of constants.
fn branch_type(schema: &Value) -> Option<&str> {
    schema.get("type").and_then(Value::as_str).or_else(|| {
        schema
            .get("oneOf")?
            .as_array()?
            .first()?
            .get("type")?
            .as_str()
    })
}

fn check_step_list(value: &Value, path: &Path, diags: &mut Diagnostics) {
    let Some(items) = value.as_array() else {
        diags.error(
            path.render(),
            format!("expected a list of steps, got {}", describe(value)),
        );
        return;
    };
    for (i, item) in items.iter().enumerate() {
        check_step(item, &path.index(i), diags);
    }
}

fn check_object(obj: &Map<String, Value>, schema: &Value, path: &Path, diags: &mut Diagnostics) {
    if schema.get("x-kubernetes-preserve-unknown-fields").is_some()
        && schema.get("properties").is_none()
    {
        return;
    }
    let props = schema.get("properties").and_then(Value::as_object);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                diags.error(path.render(), format!("missing required field {r:?}"));
            }
        }
    }
    for (key, v) in obj {
        let child = path.key(key);
        match (
            props.and_then(|p| p.get(key)),
            schema.get("additionalProperties"),
        ) {
            (Some(s), _) => check(v, s, &child, diags),
            (None, Some(s)) if s.is_object() => check(v, s, &child, diags),
            (None, _) if props.is_some() => {
                let hint = suggest(key, props.unwrap().keys().map(String::as_str))
                    .map(|s| format!(" (did you mean {s:?}?)"))
                    .unwrap_or_default();
                diags.error(child.render(), format!("unknown field{hint}"));
            }
            _ => {}
        }
    }
}

/// Whether `value` satisfies the schema's `enum`/`const`/`oneOf` of constants, without copying
/// the allowed values (this runs for every step's `type`).
fn value_allowed(schema: &Value, value: &Value) -> bool {
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        return e.contains(value);
    }
    if let Some(c) = schema.get("const") {
        return c == value;
    }
    match schema.get("oneOf").and_then(Value::as_array) {
        Some(options)
            if options
                .iter()
                .all(|o| o.get("enum").is_some() || o.get("const").is_some()) =>
        {
            options.iter().any(|o| value_allowed(o, value))
        }
        _ => true,
    }
}

fn allowed_values(schema: &Value) -> Option<Vec<Value>> {
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

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => true,
    }
}

fn type_word(t: &str) -> &str {
    match t {
        "array" => "list",
        other => other,
    }
}

/// A value as a user recognises it in an error message.
pub fn describe(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() > 40 => {
            format!(
                "{:?}",
                format!("{}…", s.chars().take(40).collect::<String>())
            )
        }
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => format!("number {n}"),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Null => "null".into(),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
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

/// The chart's `templates/crd-pseudoflow.yaml`: the same CRD behind `crds.install`, with any
/// `{{` escaped so Helm does not read the schema's text as template code.
pub fn crd_chart_template() -> String {
    let body = crd_yaml().replace("{{", "{{ \"{{\" }}");
    format!("{{{{- if .Values.crds.install }}}}\n{body}{{{{- end }}}}\n")
}

/// The CRD manifest checked in as `crd/pseudoflow.yaml`.
pub fn crd_yaml() -> String {
    let crd = serde_json::to_value(PseudoFlow::crd()).expect("CRD serialises");
    let crd = to_structural(crd);
    let header =
        "# Generated by `make crd` (pseudoflow-crdgen) from crd/src: do not edit by hand.\n";
    format!(
        "{header}{}",
        serde_yaml::to_string(&crd).expect("CRD renders as YAML")
    )
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
