//! Problems found in a flow, each tied to the path of the field that caused it, so a user can
//! find the typo without reading the whole flow.

use std::fmt;

/// How bad a diagnostic is: errors stop the flow before any step runs, warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The flow does not run until it is fixed.
    Error,
    /// Reported; the flow still runs.
    Warning,
}

/// One problem at one path, e.g. `spec.steps[3].then[0].seconds: expected integer, got "ten"`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    /// Whether the problem stops the flow.
    pub severity: Severity,
    /// Dotted path into the resource, starting at `spec`.
    pub path: String,
    /// What is wrong, for a person (e.g. `expected integer, got "ten"`).
    pub message: String,
    /// 1-based line in the source YAML, when the caller could locate the path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        match self.line {
            Some(line) => write!(f, "{sev}: line {line}: {}: {}", self.path, self.message),
            None => write!(f, "{sev}: {}: {}", self.path, self.message),
        }
    }
}

/// All problems of a flow at once: users fix a flow in one round, not one error per apply.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Records an error at `path`.
    pub fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Error, path, message);
    }

    /// Records a warning at `path`.
    pub fn warning(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Warning, path, message);
    }

    fn push(&mut self, severity: Severity, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Diagnostic {
            severity,
            path: path.into(),
            message: message.into(),
            line: None,
        });
    }

    /// True when at least one error (not just warnings) was found.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|d| d.severity == Severity::Error)
    }

    /// The errors only.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.severity == Severity::Error)
    }

    /// The warnings only.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.severity == Severity::Warning)
    }

    /// Appends all of `other`.
    pub fn extend(&mut self, other: Diagnostics) {
        self.0.extend(other.0);
    }

    /// Removes exact duplicates (same path and message), keeping the order of appearance.
    pub fn dedup(&mut self) {
        let mut seen = std::collections::HashSet::new();
        self.0
            .retain(|d| seen.insert((d.path.clone(), d.message.clone())));
    }

    /// True when no problem, not even a warning, was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of problems, errors and warnings together.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.0 {
            writeln!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}
