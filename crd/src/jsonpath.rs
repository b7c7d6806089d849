//! kubectl-style jsonPath (`{.status.phase}`, `.status.phase`,
//! `.status.conditions[?(@.type=="Ready")].status`), parsed at validation time and evaluated by
//! the executor, so conditions behave the same in `if`, `when` and `waitFor`.

use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    /// `.name` or `['name']`: a field of an object.
    Field(String),
    /// `[n]`: an item of a list; negative counts from the end.
    Index(i64),
    /// `.*` or `[*]`: every item of a list or value of an object.
    Wildcard,
    /// `[?(@.a.b=="x")]`, `[?(@.a!="x")]` or `[?(@.a)]` (exists).
    Filter {
        /// Field path below `@`, e.g. `["a", "b"]` for `@.a.b`.
        path: Vec<String>,
        /// `(true, v)` for `==v`, `(false, v)` for `!=v`; None only tests that the field exists.
        test: Option<(bool, String)>,
    },
}

/// A parsed jsonPath.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath(pub Vec<Segment>);

/// Why a jsonPath cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid jsonPath {input:?}: {reason}")]
pub struct JsonPathError {
    /// The jsonPath as written.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl JsonPath {
    /// Parses kubectl-style syntax, with or without the surrounding `{}`.
    pub fn parse(input: &str) -> Result<JsonPath, JsonPathError> {
        let err = |reason: &str| JsonPathError {
            input: input.into(),
            reason: reason.into(),
        };
        let mut s = input.trim();
        if let Some(inner) = s.strip_prefix('{') {
            s = inner
                .strip_suffix('}')
                .ok_or_else(|| err("missing closing '}'"))?;
        }
        let s = s.strip_prefix('$').unwrap_or(s);
        if s.is_empty() {
            return Err(err("empty path"));
        }
        let chars: Vec<char> = s.chars().collect();
        let mut segs = Vec::new();
        let mut i = 0;
        if chars[0] != '.' && chars[0] != '[' {
            i = read_field(&chars, 0, &mut segs);
        }
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    if chars.get(i + 1) == Some(&'.') {
                        return Err(err("recursive descent '..' is not supported"));
                    }
                    if chars.get(i + 1) == Some(&'*') {
                        segs.push(Segment::Wildcard);
                        i += 2;
                    } else {
                        let next = read_field(&chars, i + 1, &mut segs);
                        if next == i + 1 {
                            return Err(err("empty field name after '.'"));
                        }
                        i = next;
                    }
                }
                '[' => {
                    let close = find_bracket_end(&chars, i).ok_or_else(|| err("unclosed '['"))?;
                    let inner: String = chars[i + 1..close].iter().collect();
                    segs.push(parse_bracket(inner.trim()).map_err(|r| err(&r))?);
                    i = close + 1;
                }
                c => return Err(err(&format!("unexpected {c:?} at offset {i}"))),
            }
        }
        Ok(JsonPath(segs))
    }

    /// Every value the path selects in `root` (empty when the path is missing).
    pub fn eval<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![root];
        for seg in &self.0 {
            let mut next = Vec::new();
            for v in current {
                match seg {
                    Segment::Field(name) => next.extend(v.get(name)),
                    Segment::Index(idx) => {
                        if let Some(arr) = v.as_array() {
                            let i = if *idx < 0 {
                                arr.len() as i64 + idx
                            } else {
                                *idx
                            };
                            next.extend(usize::try_from(i).ok().and_then(|i| arr.get(i)));
                        }
                    }
                    Segment::Wildcard => match v {
                        Value::Array(a) => next.extend(a.iter()),
                        Value::Object(o) => next.extend(o.values()),
                        _ => {}
                    },
                    Segment::Filter { path, test } => {
                        let items: Vec<&Value> = match v {
                            Value::Array(a) => a.iter().collect(),
                            _ => vec![],
                        };
                        next.extend(items.into_iter().filter(|item| {
                            let found = path.iter().try_fold(*item, |acc, k| acc.get(k));
                            match (found, test) {
                                (None, _) => false,
                                (Some(_), None) => true,
                                (Some(f), Some((eq, want))) => (scalar_text(f) == *want) == *eq,
                            }
                        }));
                    }
                }
            }
            current = next;
        }
        current
    }

    /// The selected values as kubectl prints them: scalars as text, joined by spaces.
    pub fn eval_text(&self, root: &Value) -> Option<String> {
        let found = self.eval(root);
        if found.is_empty() {
            return None;
        }
        Some(
            found
                .into_iter()
                .map(scalar_text)
                .collect::<Vec<_>>()
                .join(" "),
        )
    }
}

/// Text of a JSON value as kubectl's jsonpath prints it (strings unquoted).
pub fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn read_field(chars: &[char], mut i: usize, segs: &mut Vec<Segment>) -> usize {
    let mut name = String::new();
    while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
        if chars[i] == '\\' && i + 1 < chars.len() {
            name.push(chars[i + 1]);
            i += 2;
        } else {
            name.push(chars[i]);
            i += 1;
        }
    }
    if !name.is_empty() {
        segs.push(Segment::Field(name));
    }
    i
}

fn find_bracket_end(chars: &[char], open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut depth = 0;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<&str> {
    let s = s.trim();
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return Some(inner);
        }
    }
    None
}

fn parse_bracket(inner: &str) -> Result<Segment, String> {
    if inner == "*" {
        return Ok(Segment::Wildcard);
    }
    if let Some(name) = unquote(inner) {
        return Ok(Segment::Field(name.into()));
    }
    if let Ok(n) = inner.parse::<i64>() {
        return Ok(Segment::Index(n));
    }
    let expr = inner
        .strip_prefix("?(")
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("unsupported subscript [{inner}]: use [n], [*], ['name'] or [?(@.field==\"value\")]"))?;
    let (lhs, test) = if let Some((l, r)) = expr.split_once("!=") {
        (l, Some((false, r)))
    } else if let Some((l, r)) = expr.split_once("==") {
        (l, Some((true, r)))
    } else {
        (expr, None)
    };
    let field = lhs
        .trim()
        .strip_prefix("@.")
        .ok_or_else(|| format!("filter must start with '@.': [{inner}]"))?;
    let path: Vec<String> = field.split('.').map(str::to_string).collect();
    if path.iter().any(String::is_empty) {
        return Err(format!("empty field in filter [{inner}]"));
    }
    let test = match test {
        None => None,
        Some((eq, raw)) => {
            let raw = raw.trim();
            let value = unquote(raw)
                .map(str::to_string)
                .unwrap_or_else(|| raw.to_string());
            Some((eq, value))
        }
    };
    Ok(Segment::Filter { path, test })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "metadata": {"labels": {"app.kubernetes.io/name": "dns"}},
            "status": {
                "phase": "Running",
                "replicas": 3,
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "Available", "status": "False"}
                ]
            }
        })
    }

    #[test]
    fn braces_and_leading_dot_are_equivalent() {
        for p in [
            "{.status.phase}",
            ".status.phase",
            "status.phase",
            "$.status.phase",
        ] {
            assert_eq!(
                JsonPath::parse(p).unwrap().eval_text(&doc()).as_deref(),
                Some("Running"),
                "{p}"
            );
        }
    }

    #[test]
    fn filters_select_matching_items() {
        let p = JsonPath::parse(r#"{.status.conditions[?(@.type=="Ready")].status}"#).unwrap();
        assert_eq!(p.eval_text(&doc()).as_deref(), Some("True"));
        let p = JsonPath::parse(r#".status.conditions[?(@.type!="Ready")].type"#).unwrap();
        assert_eq!(p.eval_text(&doc()).as_deref(), Some("Available"));
    }

    #[test]
    fn indexes_wildcards_and_escaped_dots() {
        let d = doc();
        assert_eq!(
            JsonPath::parse(".status.conditions[1].type")
                .unwrap()
                .eval_text(&d)
                .as_deref(),
            Some("Available")
        );
        assert_eq!(
            JsonPath::parse(".status.conditions[-1].type")
                .unwrap()
                .eval_text(&d)
                .as_deref(),
            Some("Available")
        );
        assert_eq!(
            JsonPath::parse(".status.conditions[*].type")
                .unwrap()
                .eval_text(&d)
                .as_deref(),
            Some("Ready Available")
        );
        assert_eq!(
            JsonPath::parse(r".metadata.labels.app\.kubernetes\.io/name")
                .unwrap()
                .eval_text(&d)
                .as_deref(),
            Some("dns")
        );
        assert_eq!(
            JsonPath::parse(".metadata.labels['app.kubernetes.io/name']")
                .unwrap()
                .eval_text(&d)
                .as_deref(),
            Some("dns")
        );
        assert_eq!(
            JsonPath::parse(".status.replicas")
                .unwrap()
                .eval_text(&d)
                .as_deref(),
            Some("3")
        );
    }

    #[test]
    fn missing_paths_select_nothing() {
        assert_eq!(
            JsonPath::parse(".status.nope").unwrap().eval_text(&doc()),
            None
        );
    }

    #[test]
    fn malformed_paths_are_errors() {
        for bad in [
            "",
            "{.a",
            ".a..b",
            ".a[",
            ".a[?(x==1)]",
            ".a[foo]",
            ".a.",
            "..a",
        ] {
            assert!(JsonPath::parse(bad).is_err(), "{bad:?} should fail");
        }
    }
}
