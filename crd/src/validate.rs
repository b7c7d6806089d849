//! Validation of a whole flow in two passes, reporting every problem at once:
//! 1. *structural*: the raw JSON is walked against each step type's generated schema, so type
//!    mismatches, missing and unknown fields are reported with their path even inside nested
//!    step lists (which the CRD schema cannot describe);
//! 2. *semantic*: each step type checks what a schema cannot (regexes, selectors, jsonPaths,
//!    ranges), and list-level rules (an `onError` needs a step before it, ...) are applied.

use serde_json::Value;

use crate::diagnostics::Diagnostics;
use crate::jsonpath::JsonPath;
use crate::selector::Selector;
use crate::spec::PseudoFlowSpec;
use crate::step::Step;
use crate::steps::registry;

/// Where a check is happening: the path for messages, the sink for problems, and what the
/// surrounding flow structure implies (e.g. inside `loopNodes`).
pub struct Ctx<'a> {
    path: String,
    diags: &'a mut Diagnostics,
    /// True inside `loopNodes`, where node steps target the loop's current node.
    pub in_node_context: bool,
}

impl<'a> Ctx<'a> {
    /// A context rooted at `path`.
    pub fn new(path: impl Into<String>, diags: &'a mut Diagnostics) -> Self {
        Ctx {
            path: path.into(),
            diags,
            in_node_context: false,
        }
    }

    /// The path this context reports at.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// A child context for a field (`then`, `steps[2]`, `condition.jsonPath`).
    pub fn at(&mut self, field: &str) -> Ctx<'_> {
        Ctx {
            path: join(&self.path, field),
            diags: self.diags,
            in_node_context: self.in_node_context,
        }
    }

    /// An error at `field` below this context (`""` for the context itself).
    pub fn error(&mut self, field: &str, message: impl Into<String>) {
        self.diags.error(join(&self.path, field), message);
    }

    /// A warning at `field` below this context.
    pub fn warning(&mut self, field: &str, message: impl Into<String>) {
        self.diags.warning(join(&self.path, field), message);
    }

    /// Checks a label selector unless it is computed at run time.
    pub fn selector(&mut self, field: &str, value: &str) {
        if !value.contains("${") {
            if let Err(e) = Selector::parse(value) {
                self.error(field, e.to_string());
            }
        }
    }

    /// Checks a selector field in either form: the string form as [`Ctx::selector`] does, the
    /// structured form's problems each at its place (`nodeSelector.matchExpressions[0].values`).
    pub fn label_selector(&mut self, field: &str, value: &crate::selector::LabelSelector) {
        match value {
            crate::selector::LabelSelector::Text(t) => self.selector(field, t),
            crate::selector::LabelSelector::Structured(s) => {
                for (at, message) in s.problems(true) {
                    self.error(&join(field, &at), message);
                }
            }
        }
    }

    /// Checks a jsonPath unless it is computed at run time.
    pub fn json_path(&mut self, field: &str, value: &str) {
        if !value.contains("${") {
            if let Err(e) = JsonPath::parse(value) {
                self.error(field, e.to_string());
            }
        }
    }

    /// Checks a regular expression unless it is computed at run time.
    pub fn regex(&mut self, field: &str, value: &str) {
        if !value.contains("${") {
            // A syntax check catches mistakes and is far cheaper than compiling the regex.
            if let Err(e) = regex_syntax::Parser::new().parse(value) {
                let first = e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                self.error(field, format!("invalid regex {value:?}: {first}"));
            }
        }
    }

    /// Checks that a name is usable as a flow variable (also in `${name}`).
    pub fn var_name(&mut self, field: &str, name: &str) {
        let ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            self.error(
                field,
                format!("{name:?} is not a valid variable name (letters, digits, '_', not starting with a digit)"),
            );
        } else if matches!(name, "item" | "index" | "node") {
            self.error(field, format!("{name:?} is reserved for loop variables"));
        }
    }
}

/// Joins a path and a field: `spec.steps[0]` + `then` → `spec.steps[0].then`.
pub fn join(path: &str, field: &str) -> String {
    match (path.is_empty(), field.is_empty()) {
        (_, true) => path.to_string(),
        (true, false) => field.to_string(),
        (false, false) if field.starts_with('[') => format!("{path}{field}"),
        (false, false) => format!("{path}.{field}"),
    }
}

/// Validates a raw `spec` (as JSON) and returns the typed spec when there is no error.
///
/// Both passes always run, so a type error in one step does not hide a structural mistake in
/// another: the semantic pass works on the raw lists and checks each step that parses.
pub fn validate_spec(raw: &Value) -> (Option<PseudoFlowSpec>, Diagnostics) {
    let mut diags = Diagnostics::default();
    // First, without recursion: every pass below recurses once per level of the flow.
    if !crate::depth::check_depth(raw, "spec", &mut diags) {
        return (None, diags);
    }
    crate::schema::check_spec_structure(raw, "spec", &mut diags);
    let mut ctx = Ctx::new("spec", &mut diags);
    if let Some(vars) = raw.get("vars").and_then(Value::as_object) {
        for name in vars.keys() {
            ctx.var_name(&format!("vars.{name}"), name);
        }
    }
    for field in ["steps", "onDelete"] {
        if let Some(list) = raw.get(field).and_then(Value::as_array) {
            check_steps(list, &mut ctx.at(field));
        }
    }
    if let Some(sa) = raw.get("serviceAccountName").and_then(Value::as_str) {
        if !is_dns_subdomain(sa) {
            ctx.error(
                "serviceAccountName",
                format!("{sa:?} is not a valid ServiceAccount name"),
            );
        }
    }
    if diags.has_errors() {
        return (None, diags);
    }
    let spec = match <PseudoFlowSpec as serde::Deserialize>::deserialize(raw) {
        Ok(s) => s,
        Err(e) => {
            diags.error("spec", format!("cannot read the flow: {e}"));
            return (None, diags);
        }
    };
    let mut ctx = Ctx::new("spec", &mut diags);
    for (i, a) in spec.artifacts.iter().enumerate() {
        a.validate(&mut ctx.at(&format!("artifacts[{i}]")));
    }
    check_schedule(&spec, &mut ctx);
    let ok = !diags.has_errors();
    (ok.then_some(spec), diags)
}

/// `schedule` parses in `timeZone`; `timeZone` and `startingDeadlineSeconds` only beside it.
fn check_schedule(spec: &PseudoFlowSpec, ctx: &mut Ctx) {
    match spec.parsed_schedule() {
        Some(Err(e)) => ctx.error(e.field(), e.to_string()),
        Some(Ok(_)) => {}
        None => {
            if spec.time_zone.is_some() {
                ctx.error("timeZone", "a time zone needs spec.schedule");
            }
            if spec.starting_deadline_seconds.is_some() {
                ctx.error(
                    "startingDeadlineSeconds",
                    "a starting deadline needs spec.schedule",
                );
            }
        }
    }
}

/// Semantic checks of one raw list of steps and of every nested list below it: list rules
/// (`onError` needs a step before it, `when` a step after it), then each step that parses.
pub fn check_steps(steps: &[Value], ctx: &mut Ctx) {
    if steps.is_empty() {
        ctx.error("", "a step list must not be empty");
    }
    let type_of = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    for (i, raw) in steps.iter().enumerate() {
        let mut sctx = ctx.at(&format!("[{i}]"));
        let ty = type_of(raw);
        match ty.as_str() {
            "onError" if i == 0 => sctx.error(
                "type",
                "onError handles the failure of the step right before it, but it is the first step of its list",
            ),
            "onError" if type_of(&steps[i - 1]) == "onError" => {
                sctx.error("type", "onError cannot follow another onError")
            }
            "onError" if steps[i - 1].get("continueOnError") == Some(&Value::Bool(true)) => sctx.error(
                "type",
                "the step before this onError has continueOnError: true, so its failure never reaches the handler",
            ),
            "when" if i + 1 == steps.len() => sctx.error(
                "type",
                "when guards the step after it, but it is the last step of its list",
            ),
            "when" if matches!(type_of(&steps[i + 1]).as_str(), "when" | "onError") => sctx.error(
                "type",
                format!("when must be followed by the step it guards, not by {}", type_of(&steps[i + 1])),
            ),
            _ => {}
        }
        if ty == "onError" && raw.get("timeoutSeconds").is_some() {
            sctx.error(
                "timeoutSeconds",
                "onError has no work of its own to time out (it only routes a failure to its \
                 steps): set timeoutSeconds on its steps, or wrap them in a parallel or retry",
            );
        }
        if let Some(step) = shallow_step(raw) {
            if step.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
                sctx.error("name", "must not be blank");
            }
            if ty == "includeFlow" {
                crate::steps::include_flow::check_flow_name(&mut sctx, step.name.as_deref());
            }
            step.kind.params().validate(&mut sctx);
        }
        let node_context = sctx.in_node_context || ty == "loopNodes";
        for (field, list) in nested_lists(&ty, raw) {
            let mut cctx = sctx.at(&field);
            cctx.in_node_context = node_context;
            check_steps(list, &mut cctx);
        }
    }
}

/// The step with its nested lists emptied, so its own fields can be checked even when a
/// nested step is broken (nested steps are checked on their own).
fn shallow_step(raw: &Value) -> Option<Step> {
    serde_json::from_value(without_nested_steps(raw)).ok()
}

/// A step's own fields with every nested step list emptied: what the work of the step itself
/// needs (a loop's start, an `if`'s condition), without its body.
pub fn without_nested_steps(raw: &Value) -> Value {
    let Some(obj) = raw.as_object() else {
        return raw.clone();
    };
    let ty = raw.get("type").and_then(Value::as_str).unwrap_or_default();
    let nested = nested_fields(ty);
    let shallow = obj
        .iter()
        .map(|(k, v)| match nested.iter().find(|(f, _)| f == k) {
            Some((_, "branches")) => (k.clone(), serde_json::json!([[]])),
            Some(_) => (k.clone(), serde_json::json!([])),
            None => (k.clone(), v.clone()),
        })
        .collect();
    Value::Object(shallow)
}

/// The fields of a step type that hold nested step lists, from its schema's markers.
pub(crate) fn nested_fields(ty: &str) -> Vec<(String, &'static str)> {
    let Some(schema) = crate::schema::step_schemas().get(ty) else {
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
fn nested_lists<'v>(ty: &str, raw: &'v Value) -> Vec<(String, &'v [Value])> {
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

/// Closest candidate by edit distance, for "did you mean" hints on typos.
pub fn suggest<'a>(input: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = input.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len().max(lower.len()) / 2).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// RFC 1123 label (Namespace, most names): what Kubernetes accepts for a DNS label.
pub fn is_dns_label(s: &str) -> bool {
    bounded_alphanumeric(s, 63, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'
    })
}

/// The shape Kubernetes names share: 1..=`max` bytes, alphanumeric at both ends, `inner` inside.
pub fn bounded_alphanumeric(s: &str, max: usize, inner: impl Fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| inner(*c))
}

/// RFC 1123 subdomain (ConfigMap, ServiceAccount names).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Registered step type names, for hints.
pub fn step_type_names() -> impl Iterator<Item = &'static str> {
    registry::STEP_TYPES.iter().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_find_near_typos_only() {
        assert_eq!(suggest("aply", step_type_names()), Some("apply"));
        assert_eq!(suggest("waitfor", step_type_names()), Some("waitFor"));
        assert_eq!(
            suggest("configfiles", step_type_names()),
            Some("configFile")
        );
        assert_eq!(suggest("kubernetes", step_type_names()), None);
    }

    #[test]
    fn a_bad_schedule_or_time_zone_is_an_error_naming_its_field() {
        use serde_json::json;
        let errors = |extra: Value| {
            let mut spec = serde_json::json!({"steps": [{"type": "log", "message": "x"}]});
            spec.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let (ok, diags) = validate_spec(&spec);
            let paths: Vec<String> = diags.errors().map(|d| d.path.clone()).collect();
            (ok.is_some(), paths)
        };
        assert_eq!(
            errors(json!({"schedule": "*/5 * * * *", "timeZone": "Europe/Berlin"})),
            (true, vec![])
        );
        assert_eq!(
            errors(json!({"schedule": "*/10 * * * * *", "suspend": true})),
            (true, vec![])
        );
        assert_eq!(
            errors(json!({"schedule": "every day"})),
            (false, vec!["spec.schedule".to_string()])
        );
        assert_eq!(
            errors(json!({"schedule": "* * * * *", "timeZone": "Nowhere/City"})),
            (false, vec!["spec.timeZone".to_string()])
        );
        assert_eq!(
            errors(json!({"timeZone": "Etc/UTC"})),
            (false, vec!["spec.timeZone".to_string()])
        );
        assert_eq!(
            errors(json!({"startingDeadlineSeconds": 10})),
            (false, vec!["spec.startingDeadlineSeconds".to_string()])
        );
    }

    #[test]
    fn paths_join_fields_and_indexes() {
        assert_eq!(join("spec.steps", "[3]"), "spec.steps[3]");
        assert_eq!(join("spec.steps[3]", "then"), "spec.steps[3].then");
        assert_eq!(join("spec", ""), "spec");
    }
}
