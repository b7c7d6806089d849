//! [`Ctx`]: where a semantic check happens. Each step type's `validate` reports through it, and
//! whole-flow validation ([`crate::validate`]) hands it down the step tree; a module of its own so
//! step types depend on it without depending on the validator that calls them.

use crate::diagnostics::Diagnostics;
use crate::jsonpath::JsonPath;
use crate::selector::Selector;
use crate::text::join;

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
