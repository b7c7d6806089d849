//! The expression engine behind `${...}`: minijinja expressions over the run's variables, with
//! Python-like methods (`.split(' ')`) and `json()`, no loader (no files), no I/O functions,
//! bounded by fuel, by a work budget checked before each operation allocates ([`crate::budget`]),
//! by a cap on result size and by a cap on nesting depth.

use std::collections::BTreeMap;

use minijinja::machinery;
use minijinja::value::Value as JinjaValue;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior};
use serde_json::Value;

use crate::budget::{Evaluation, MAX_RESULT_BYTES, MAX_WORK_BYTES};
use crate::depth::{check_depth, MAX_DEPTH};
use crate::guard;
use crate::scan::{scan, Segment};
use crate::shell::{is_quoted, is_raw};

/// Most instructions one expression may execute.
pub const FUEL: u64 = 100_000;
/// Longest expression text accepted.
pub const MAX_EXPRESSION_BYTES: usize = 2048;

/// The variables visible to an expression.
pub type Scope = BTreeMap<String, Value>;

/// A `${NAME}` left in place because `NAME` is not a variable (e.g. a shell variable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The field holding the expression (`spec.steps[2].cmd`).
    pub path: String,
    /// What was left in place and why, for the author to confirm.
    pub message: String,
}

/// Why substitution failed, with the field's path and the expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: cannot evaluate ${{{expr}}}: {reason}")]
pub struct SubstError {
    /// The field holding the expression.
    pub path: String,
    /// The expression as written, so the author recognises it.
    pub expr: String,
    /// The engine's reason (undefined name, work limit, type error...).
    pub reason: String,
}

/// What one expression refers to, found without evaluating it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprRef {
    /// The expression text between `${` and `}`.
    pub expr: String,
    /// The expression is just a name (`${dns_ip}`).
    pub plain: bool,
    /// Names it reads from the scope.
    pub names: Vec<String>,
}

/// A configured environment; build once and reuse.
pub struct Engine {
    env: Environment<'static>,
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The settings every environment gets: strict undefined, fuel, recursion limit, Python-like
/// methods, `json()`, and no `debug()`. There is no loader, so `include`/`import` cannot read.
fn configure(env: &mut Environment<'_>) {
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(64);
    env.set_unknown_method_callback(method_fn);
    env.add_filter("split", split_filter);
    env.add_function("json", json_fn);
    env.add_filter("shq", crate::shell::shq);
    env.add_filter("raw", crate::shell::raw);
    env.add_filter("oneline", crate::lines::oneline);
    env.remove_global("debug");
    crate::guard::install(env);
}

/// Python's string methods, except that an empty string splits into no items: `''.split(' ')`
/// is `[]`, not `['']`. Command output that printed nothing holds no names, as in shell word
/// splitting (`for n in $(cmd)`), so the seed's `forEach: "${out.split(' ')}"` loops zero times
/// (docs/decisions.md). A non-empty string keeps Python's empty fields (`'a,,b'.split(',')`).
fn method_fn(
    state: &mut minijinja::State,
    value: &JinjaValue,
    method: &str,
    args: &[JinjaValue],
) -> Result<JinjaValue, Error> {
    if method == "split" && value.as_str() == Some("") {
        return Ok(JinjaValue::from(Vec::<JinjaValue>::new()));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// The `split` filter, with the `.split()` method's rule for the empty string ([`method_fn`]).
fn split_filter(
    value: &JinjaValue,
    sep: Option<std::sync::Arc<str>>,
    maxsplits: Option<i64>,
) -> Result<JinjaValue, Error> {
    if value.as_str() == Some("") {
        return Ok(JinjaValue::from(Vec::<JinjaValue>::new()));
    }
    minijinja::filters::split(value, sep, maxsplits)
}

/// `json(text)`: refused before parsing when the parsed value could pass the work budget
/// (every `,`, `:`, `[` and `{` may start a value).
fn json_fn(text: String) -> Result<JinjaValue, Error> {
    let values = text.bytes().filter(|b| b",:[{".contains(b)).count() + 1;
    let estimate = text.len() + values.saturating_mul(4 * crate::cost::NODE);
    crate::budget::ensure_room("json()", estimate)?;
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("json(): not valid JSON: {e}"),
        )
    })?;
    let out = JinjaValue::from(minijinja::value::Serde(&v));
    crate::budget::charge("json()", estimate)?;
    Ok(out)
}

impl Engine {
    /// The environment every flow uses.
    pub fn new() -> Self {
        let mut env = Environment::new();
        configure(&mut env);
        Engine { env }
    }

    fn eval_raw(&self, expr: &str, scope: &Scope) -> Result<Value, String> {
        if expr.len() > MAX_EXPRESSION_BYTES {
            return Err(format!(
                "expression longer than {MAX_EXPRESSION_BYTES} bytes"
            ));
        }
        let _evaluation = Evaluation::start();
        let instructions = guard::compile_expr(expr).map_err(|e| describe(&e))?;
        let ctx = JinjaValue::from(minijinja::value::Serde(scope));
        let mut sink = String::new();
        let (v, _) = machinery::eval(
            &self.env,
            &instructions,
            ctx,
            &BTreeMap::new(),
            &mut machinery::make_string_output(&mut sink),
            AutoEscape::None,
        )
        .map_err(|e| describe(&e))?;
        let v = v.unwrap_or_default();
        if v.is_undefined() {
            return Err("undefined".into());
        }
        // Measured before converting: a list holding one large string many times is small
        // in memory but not once copied out.
        if crate::cost::cost(&v, MAX_WORK_BYTES) > MAX_WORK_BYTES {
            return Err(format!("result larger than {MAX_RESULT_BYTES} bytes"));
        }
        let json = serde_json::to_value(&v).map_err(|e| e.to_string())?;
        let size = serde_json::to_string(&json)
            .map(|s| s.len())
            .unwrap_or(usize::MAX);
        if size > MAX_RESULT_BYTES {
            return Err(format!("result larger than {MAX_RESULT_BYTES} bytes"));
        }
        check_depth(&json, MAX_DEPTH).map_err(|e| e.to_string())?;
        Ok(json)
    }

    /// Substitutes every `${...}` in one string. A string that is exactly one `${expr}` keeps the
    /// expression's type; otherwise values are rendered into the text (strings as they are,
    /// anything else as JSON). Inserted values are never scanned again (single pass).
    pub fn substitute_str(
        &self,
        s: &str,
        scope: &Scope,
        path: &str,
    ) -> Result<(Value, Vec<Warning>), SubstError> {
        self.substitute_text(s, scope, path, false)
    }

    /// Substitutes a shell command (`exec.cmd`, `script.code`) in a flow that quotes by
    /// default: each `${...}` becomes one single-quoted shell word, unless its outermost filter
    /// is `raw` (the author's opt-out) or `shq` (already quoted). A `${NAME}` that is no
    /// variable stays as written, for the shell. Always a string.
    pub fn substitute_shell(
        &self,
        s: &str,
        scope: &Scope,
        path: &str,
    ) -> Result<(Value, Vec<Warning>), SubstError> {
        self.substitute_text(s, scope, path, true)
    }

    fn substitute_text(
        &self,
        s: &str,
        scope: &Scope,
        path: &str,
        quote: bool,
    ) -> Result<(Value, Vec<Warning>), SubstError> {
        let segs = scan(s).map_err(|e| SubstError {
            path: path.into(),
            expr: s.into(),
            reason: e.to_string(),
        })?;
        let mut warnings = Vec::new();
        let mut eval = |expr: &str| -> Result<Option<Value>, SubstError> {
            let trimmed = expr.trim();
            if is_identifier(trimmed) && !scope.contains_key(trimmed) {
                warnings.push(Warning {
                    path: path.into(),
                    message: format!(
                        "${{{trimmed}}} is not a flow variable; left as is (e.g. for the shell)"
                    ),
                });
                return Ok(None);
            }
            self.eval_raw(trimmed, scope)
                .map(Some)
                .map_err(|reason| SubstError {
                    path: path.into(),
                    expr: expr.into(),
                    reason,
                })
        };
        if let (false, [Segment::Expr(expr)]) = (quote, segs.as_slice()) {
            let v = eval(expr)?.unwrap_or_else(|| Value::String(format!("${{{expr}}}")));
            return Ok((v, warnings));
        }
        let mut out = String::new();
        for seg in &segs {
            match seg {
                Segment::Literal(text) => out.push_str(text),
                Segment::Expr(expr) => match eval(expr)? {
                    Some(v) if quote && !is_quoted(expr) && !is_raw(expr) => {
                        out.push_str(&crate::shell::quote(&as_text(v)))
                    }
                    Some(v) => out.push_str(&as_text(v)),
                    None => {
                        out.push_str("${");
                        out.push_str(expr);
                        out.push('}');
                    }
                },
            }
            if out.len() > MAX_RESULT_BYTES {
                return Err(SubstError {
                    path: path.into(),
                    expr: s.into(),
                    reason: format!("result larger than {MAX_RESULT_BYTES} bytes"),
                });
            }
        }
        Ok((Value::String(out), warnings))
    }

    /// Substitutes every string in a JSON value (array items, object values and keys).
    pub fn substitute(
        &self,
        value: &Value,
        scope: &Scope,
        path: &str,
    ) -> Result<(Value, Vec<Warning>), SubstError> {
        let mut warnings = Vec::new();
        let v = self.walk(value, scope, path, &mut warnings)?;
        Ok((v, warnings))
    }

    fn walk(
        &self,
        value: &Value,
        scope: &Scope,
        path: &str,
        warnings: &mut Vec<Warning>,
    ) -> Result<Value, SubstError> {
        Ok(match value {
            Value::String(s) => {
                let (v, w) = self.substitute_str(s, scope, path)?;
                warnings.extend(w);
                v
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.walk(v, scope, &format!("{path}[{i}]"), warnings))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => {
                let mut out = serde_json::Map::new();
                for (k, v) in map {
                    let child = format!("{path}.{k}");
                    let key = match self.substitute_str(k, scope, &child)? {
                        (Value::String(s), w) => {
                            warnings.extend(w);
                            s
                        }
                        (other, _) => other.to_string(),
                    };
                    out.insert(key, self.walk(v, scope, &child, warnings)?);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }

    /// Evaluates an `eval` step's expression, in which `${name}` means the variable `name`: each
    /// `${...}` becomes a parenthesised sub-expression, never the variable's text.
    pub fn eval_expression(
        &self,
        expr: &str,
        scope: &Scope,
        path: &str,
    ) -> Result<Value, SubstError> {
        let rewritten = rewrite_references(expr).map_err(|reason| SubstError {
            path: path.into(),
            expr: expr.into(),
            reason,
        })?;
        self.eval_raw(&rewritten, scope)
            .map_err(|reason| SubstError {
                path: path.into(),
                expr: expr.into(),
                reason,
            })
    }

    /// Renders a `template` step's body (minijinja template syntax) with the scope.
    pub fn render_template(
        &self,
        template: &str,
        scope: &Scope,
        path: &str,
    ) -> Result<String, SubstError> {
        let err = |reason: String| SubstError {
            path: path.into(),
            expr: "template".into(),
            reason,
        };
        let _evaluation = Evaluation::start();
        let (main, blocks) = guard::compile_template(template).map_err(|e| err(describe(&e)))?;
        let mut out = String::new();
        machinery::eval(
            &self.env,
            &main,
            JinjaValue::from(minijinja::value::Serde(scope)),
            &blocks,
            &mut machinery::make_string_output(&mut out),
            AutoEscape::None,
        )
        .map_err(|e| err(describe(&e)))?;
        if out.len() > MAX_RESULT_BYTES {
            return Err(err(format!("result larger than {MAX_RESULT_BYTES} bytes")));
        }
        Ok(out)
    }

    /// Parses every `${...}` in `s` without evaluating; returns what each refers to.
    pub fn check(&self, s: &str, path: &str) -> Result<Vec<ExprRef>, SubstError> {
        let segs = scan(s).map_err(|e| SubstError {
            path: path.into(),
            expr: s.into(),
            reason: e.to_string(),
        })?;
        let mut out = Vec::new();
        for seg in segs {
            if let Segment::Expr(expr) = seg {
                out.push(self.check_expr(&expr, path)?);
            }
        }
        Ok(out)
    }

    /// Like [`Engine::check`] for an `eval` expression (its `${name}` are references).
    pub fn check_eval(&self, expr: &str, path: &str) -> Result<ExprRef, SubstError> {
        let rewritten = rewrite_references(expr).map_err(|reason| SubstError {
            path: path.into(),
            expr: expr.into(),
            reason,
        })?;
        let mut r = self.check_expr(&rewritten, path)?;
        r.plain = false;
        Ok(r)
    }

    /// Syntax and free names of a template body.
    pub fn check_template(&self, template: &str, path: &str) -> Result<Vec<String>, SubstError> {
        let refuse = |e: Error| SubstError {
            path: path.into(),
            expr: "template".into(),
            reason: describe(&e),
        };
        guard::check_template_constants(template).map_err(refuse)?;
        let mut env = Environment::new();
        configure(&mut env);
        let tmpl = env.template_from_str(template).map_err(|e| SubstError {
            path: path.into(),
            expr: "template".into(),
            reason: describe(&e),
        })?;
        let mut names: Vec<String> = tmpl.undeclared_variables(false).into_iter().collect();
        names.sort();
        Ok(names)
    }

    fn check_expr(&self, expr: &str, path: &str) -> Result<ExprRef, SubstError> {
        let trimmed = expr.trim();
        guard::check_expr_constants(trimmed).map_err(|e| SubstError {
            path: path.into(),
            expr: expr.into(),
            reason: describe(&e),
        })?;
        let compiled = self
            .env
            .compile_expression_owned(trimmed.to_string())
            .map_err(|e| SubstError {
                path: path.into(),
                expr: expr.into(),
                reason: describe(&e),
            })?;
        let mut names: Vec<String> = compiled.undeclared_variables(false).into_iter().collect();
        names.sort();
        Ok(ExprRef {
            expr: expr.to_string(),
            plain: is_identifier(trimmed),
            names,
        })
    }
}

/// A value as it is rendered into text: a string as it is, anything else as JSON.
fn as_text(v: Value) -> String {
    match v {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// `json(${mapping})` → `json((mapping))`: references become sub-expressions.
fn rewrite_references(expr: &str) -> Result<String, String> {
    let mut out = String::new();
    for seg in scan(expr).map_err(|e| e.to_string())? {
        match seg {
            Segment::Literal(t) => out.push_str(&t),
            Segment::Expr(e) => {
                out.push('(');
                out.push_str(&e);
                out.push(')');
            }
        }
    }
    Ok(out)
}

fn describe(e: &Error) -> String {
    let mut msg = e
        .detail()
        .map(str::to_string)
        .unwrap_or_else(|| e.kind().to_string());
    if e.kind() == ErrorKind::OutOfFuel {
        msg = "too much work (expression exceeded its fuel)".into();
    }
    msg
}
