//! Quoting for the shell: `${ x | shq }` in `cmd`/`code` inserts `x` as one POSIX
//! single-quoted word, so a value with spaces, quotes, `;` or `$(...)` stays data.

use minijinja::value::Value;

/// `shq`: the value as one single-quoted shell word (`it's` → `'it'\''s'`). Strings are quoted
/// as they are; anything else as its JSON text, as it would be rendered into the field.
pub fn shq(value: &Value) -> String {
    let text = match value.as_str() {
        Some(s) => s.to_string(),
        None => serde_json::to_string(value).unwrap_or_else(|_| value.to_string()),
    };
    quote(&text)
}

/// POSIX single quoting: everything is literal inside `'...'` except `'` itself, which is
/// written as `'\''` (close, escaped quote, reopen).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// `raw`: the value unchanged. In a flow that quotes commands by default it says "insert this as
/// shell syntax", the author's explicit opt-out (a warning when the value is tenant data).
pub fn raw(value: Value) -> Value {
    value
}

/// True when the expression's outermost operation is the `shq` filter (`x | shq`,
/// `(a ~ b) | shq`), i.e. its whole result is quoted.
pub fn is_quoted(expr: &str) -> bool {
    outermost_filter(expr).as_deref() == Some("shq")
}

/// True when the expression's outermost operation is the `raw` filter: the author asks for the
/// value as shell syntax.
pub fn is_raw(expr: &str) -> bool {
    outermost_filter(expr).as_deref() == Some("raw")
}

/// The name of the filter applied last in `expr`, if its outermost operation is a filter.
pub(crate) fn outermost_filter(expr: &str) -> Option<String> {
    use minijinja::machinery::{ast::Expr, parse_expr};
    match parse_expr(expr.trim()) {
        Ok(Expr::Filter(f)) => Some(f.name.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_posix_single_quotes() {
        assert_eq!(quote("plain"), "'plain'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(
            quote("a b; rm -rf / $(x) `y` \"z\""),
            "'a b; rm -rf / $(x) `y` \"z\"'"
        );
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn non_strings_are_quoted_as_json() {
        assert_eq!(shq(&Value::from(3)), "'3'");
        assert_eq!(shq(&Value::from(vec!["a", "b"])), "'[\"a\",\"b\"]'");
    }

    #[test]
    fn only_an_outermost_shq_counts_as_quoted() {
        assert!(is_quoted(" out | shq "));
        assert!(is_quoted("(a ~ b) | shq"));
        assert!(!is_quoted("out"));
        assert!(!is_quoted("(out | shq) ~ ' ' ~ out"));
        assert!(!is_quoted("out | upper"));
        assert!(is_raw("out | raw"));
        assert!(!is_raw("(out | raw) ~ x"));
        assert!(!is_raw("out"));
    }
}
