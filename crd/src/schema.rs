//! Schemas generated from the step types, used twice:
//! - by the structural validator, which walks a raw flow against each step type's own schema
//!   (reporting every type mismatch, missing and unknown field with its path), and
//! - for the CRD, where all step types are merged into one structural object schema with CEL
//!   rules for each type's required fields, so `kubectl apply` rejects what OpenAPI can express.

use std::sync::OnceLock;

use kube::CustomResourceExt;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use crate::diagnostics::Diagnostics;
use crate::spec::PseudoFlow;
use crate::step_schema::{allowed_values, step_schemas, to_structural, NESTED_MARK, STEP_MARK};
use crate::steps::registry::STEP_TYPES;
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

/// The chart's `templates/crd-pseudoflow.yaml`: the same CRD behind `crds.install`, with any
/// `{{` escaped so Helm does not read the schema's text as template code. With `crds.keep` (the
/// default) it carries `helm.sh/resource-policy: keep`, so `helm uninstall` leaves the CRD, and
/// with it every flow, in place (as cert-manager's `crds.keep`); `helm upgrade` still updates it.
pub fn crd_chart_template() -> String {
    const NAME: &str = "metadata:\n  name: pseudoflows.ops.example.com\n";
    const KEEP: &str = "{{- if .Values.crds.keep }}\n  annotations:\n    helm.sh/resource-policy: keep\n{{- end }}\n";
    let body = crd_yaml().replace("{{", "{{ \"{{\" }}");
    assert!(body.contains(NAME), "the CRD's metadata is its name only");
    let body = body.replacen(NAME, &format!("{NAME}{KEEP}"), 1);
    format!("{{{{- if .Values.crds.install }}}}\n{body}{{{{- end }}}}\n")
}

/// The CRD manifest checked in as `crd/pseudoflow.yaml`.
pub fn crd_yaml() -> String {
    let crd = serde_json::to_value(PseudoFlow::crd()).expect("CRD serialises");
    let crd = with_versions(to_structural(crd));
    let header =
        "# Generated by `make crd` (pseudoflow-crdgen) from crd/src: do not edit by hand.\n";
    format!(
        "{header}{}",
        serde_yaml::to_string(&crd).expect("CRD renders as YAML")
    )
}

/// The CRD serving `v1alpha1` (storage) and `v1beta1` with one schema but for the default of
/// `spec.shellQuoting`: the API server writes the request version's default into the stored
/// object, so each flow keeps the quoting it was written for whichever version reads it
/// (docs/decisions.md#quoted-by-default).
fn with_versions(mut crd: Value) -> Value {
    use crate::quoting::{ShellQuoting, QUOTED_VERSION, RAW_VERSION};
    let Some(versions) = crd
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    else {
        return crd;
    };
    let Some(mut beta) = versions.first().cloned() else {
        return crd;
    };
    beta["name"] = Value::String(QUOTED_VERSION.into());
    beta["storage"] = Value::Bool(false);
    for (v, name) in [(&mut versions[0], RAW_VERSION), (&mut beta, QUOTED_VERSION)] {
        let default = ShellQuoting::default_for(name).as_str();
        if let Some(field) =
            v.pointer_mut("/schema/openAPIV3Schema/properties/spec/properties/shellQuoting")
        {
            field["default"] = Value::String(default.into());
        }
    }
    versions.push(beta);
    crd
}
