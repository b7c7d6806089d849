//! Label selector strings (`""`, `key`, `!key`, `key=value`, `key!=value`, `key in (a,b)`,
//! `key notin (a,b)`), parsed once at validation and matched by the executor the same way the
//! API server would, so a typo fails before any node is touched.

use std::collections::BTreeMap;
use std::fmt;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key`: the label is present.
    Exists(String),
    /// `!key`: the label is absent.
    NotExists(String),
    /// `key=value` or `key==value`.
    Equals(String, String),
    /// `key!=value`: also true when the label is absent.
    NotEquals(String, String),
    /// `key in (a,b)`: the label is present with one of the values.
    In(String, Vec<String>),
    /// `key notin (a,b)`: the label is absent or has none of the values.
    NotIn(String, Vec<String>),
}

/// A parsed label selector; empty means "everything".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(pub Vec<Requirement>);

/// Why a selector string is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {input:?}: {reason}")]
pub struct SelectorError {
    /// The selector as written.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Selector {
    /// Parses a selector string.
    pub fn parse(input: &str) -> Result<Selector, SelectorError> {
        let err = |reason: String| SelectorError {
            input: input.to_string(),
            reason,
        };
        let mut reqs = Vec::new();
        for part in split_top_level(input).map_err(err)? {
            let part = part.trim();
            if part.is_empty() {
                if input.trim().is_empty() {
                    continue;
                }
                return Err(err("empty requirement between commas".into()));
            }
            reqs.push(parse_requirement(part).map_err(err)?);
        }
        Ok(Selector(reqs))
    }

    /// True when `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
        })
    }
}

impl fmt::Display for Selector {
    /// The API server's syntax, usable as a `labelSelector` list parameter.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|r| match r {
                Requirement::Exists(k) => k.clone(),
                Requirement::NotExists(k) => format!("!{k}"),
                Requirement::Equals(k, v) => format!("{k}={v}"),
                Requirement::NotEquals(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

fn split_top_level(input: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced ')'".into());
                }
            }
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unclosed '('".into());
    }
    parts.push(&input[start..]);
    Ok(parts)
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        check_key(key)?;
        return Ok(Requirement::NotExists(key.into()));
    }
    for (op, not) in [(" notin ", true), (" in ", false)] {
        if let Some(idx) = part.find(op) {
            let key = part[..idx].trim();
            check_key(key)?;
            let rest = part[idx + op.len()..].trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("values of {key:?} must be in parentheses: (a,b)"))?;
            let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
            for v in &values {
                check_value(v)?;
            }
            return Ok(if not {
                Requirement::NotIn(key.into(), values)
            } else {
                Requirement::In(key.into(), values)
            });
        }
    }
    for (op, ctor) in [
        (
            "!=",
            Requirement::NotEquals as fn(String, String) -> Requirement,
        ),
        ("==", Requirement::Equals),
        ("=", Requirement::Equals),
    ] {
        if let Some(idx) = part.find(op) {
            let key = part[..idx].trim();
            let value = part[idx + op.len()..].trim();
            check_key(key)?;
            check_value(value)?;
            return Ok(ctor(key.into(), value.into()));
        }
    }
    check_key(part)?;
    Ok(Requirement::Exists(part.into()))
}

fn is_name(s: &str) -> bool {
    crate::validate::bounded_alphanumeric(s, 63, |c| {
        c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')
    })
}

fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            });
        if !ok {
            return Err(format!("{key:?}: prefix {p:?} is not a DNS subdomain"));
        }
    }
    if !is_name(name) {
        return Err(format!(
            "{key:?} is not a valid label key (alphanumerics, '-', '_', '.', at most 63 characters)"
        ));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_name(value) {
        Ok(())
    } else {
        Err(format!("{value:?} is not a valid label value"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = Selector::parse("").unwrap();
        assert!(s.0.is_empty());
        assert!(s.matches(&labels(&[])));
    }

    #[test]
    fn exists_and_not_exists() {
        let cp = labels(&[("node-role.kubernetes.io/control-plane", "")]);
        let yes = Selector::parse("node-role.kubernetes.io/control-plane").unwrap();
        let no = Selector::parse("!node-role.kubernetes.io/control-plane").unwrap();
        assert!(yes.matches(&cp) && !no.matches(&cp));
        assert!(!yes.matches(&labels(&[])) && no.matches(&labels(&[])));
    }

    #[test]
    fn equality_and_set_operators() {
        let l = labels(&[("env", "prod"), ("zone", "a")]);
        assert!(Selector::parse("env=prod,zone in (a,b)")
            .unwrap()
            .matches(&l));
        assert!(!Selector::parse("env!=prod").unwrap().matches(&l));
        assert!(Selector::parse("env==prod").unwrap().matches(&l));
        assert!(!Selector::parse("zone notin (a)").unwrap().matches(&l));
        assert!(Selector::parse("tier notin (web)").unwrap().matches(&l));
    }

    #[test]
    fn round_trips_to_api_syntax() {
        let s = Selector::parse("a=b, !c ,d in (x, y)").unwrap();
        assert_eq!(s.to_string(), "a=b,!c,d in (x,y)");
    }

    #[test]
    fn invalid_selectors_are_rejected_with_reason() {
        for bad in ["a in b", "a in (x", "=x", "bad key=1", "a,,b", "a=b c"] {
            let e = Selector::parse(bad).unwrap_err();
            assert_eq!(e.input, bad);
        }
    }
}
