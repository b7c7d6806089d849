//! Label selectors as flows write them — the string form (`""`, `key`, `!key`, `key=value`,
//! `key!=value`, `key in (a,b)`, `key notin (a,b)`) or Kubernetes' structured form
//! (`matchLabels`/`matchExpressions`, [`LabelSelector`]) — parsed once at validation and matched
//! by the executor the same way the API server would, so a typo fails before any node is touched.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

/// A selector field (`nodeSelector`, `loopNodes.selector`, `target.selector`): the string form
/// or the structured form of a Kubernetes `LabelSelector`. Both mean the same requirements
/// (every one must hold); an empty selector (`""` or `{}`) selects everything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum LabelSelector {
    /// `""` = everything, `key`, `!key`, `key=value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`.
    Text(String),
    /// `{matchLabels: {k: v}, matchExpressions: [{key, operator, values}]}`.
    Structured(StructuredSelector),
}

/// Kubernetes' structured label selector (`metav1.LabelSelector`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StructuredSelector {
    /// Each label must be present with exactly this value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Each requirement must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`/`NotIn` compare with `values`; `Exists`/`DoesNotExist` test the key alone.
    pub operator: SelectorOperator,
    /// At least one for `In`/`NotIn`; none for `Exists`/`DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// The operators of `matchExpressions`, spelled as Kubernetes spells them.
// No doc comments on the variants: schemars would turn them into `oneOf` branches (see RunOn).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// The empty selector (`""`): everything, e.g. every node for an `execNode` without `nodeSelector`.
pub static EVERY_NODE: LabelSelector = LabelSelector::Text(String::new());

impl Default for LabelSelector {
    fn default() -> Self {
        LabelSelector::Text(String::new())
    }
}

impl From<&str> for LabelSelector {
    fn from(s: &str) -> Self {
        LabelSelector::Text(s.to_string())
    }
}

impl LabelSelector {
    /// The selector in the string form (as written, or the structured form rendered), for
    /// display; a structured selector that is not valid renders its requirements as written.
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            LabelSelector::Text(t) => Cow::Borrowed(t),
            LabelSelector::Structured(s) => Cow::Owned(s.requirements_unchecked().to_string()),
        }
    }

    /// The parsed requirements; the error names the first problem (for the structured form,
    /// with its place: `matchExpressions[0].values: ...`).
    pub fn parse(&self) -> Result<Selector, SelectorError> {
        match self {
            LabelSelector::Text(t) => Selector::parse(t),
            LabelSelector::Structured(s) => match s.problems(false).into_iter().next() {
                Some((at, reason)) => Err(SelectorError {
                    input: self.text().into_owned(),
                    reason: format!("{at}: {reason}"),
                }),
                None => Ok(s.requirements_unchecked()),
            },
        }
    }
}

impl StructuredSelector {
    fn requirements_unchecked(&self) -> Selector {
        let mut reqs: Vec<Requirement> = self
            .match_labels
            .iter()
            .map(|(k, v)| Requirement::Equals(k.clone(), v.clone()))
            .collect();
        for e in &self.match_expressions {
            let key = e.key.clone();
            reqs.push(match e.operator {
                SelectorOperator::In => Requirement::In(key, e.values.clone()),
                SelectorOperator::NotIn => Requirement::NotIn(key, e.values.clone()),
                SelectorOperator::Exists => Requirement::Exists(key),
                SelectorOperator::DoesNotExist => Requirement::NotExists(key),
            });
        }
        Selector(reqs)
    }

    /// Every problem, each with where it is (`matchLabels.env`, `matchExpressions[1].values`).
    /// With `skip_expressions`, keys and values holding `${` are left for run time.
    pub fn problems(&self, skip_expressions: bool) -> Vec<(String, String)> {
        let later = |s: &str| skip_expressions && s.contains("${");
        let mut out = Vec::new();
        for (k, v) in &self.match_labels {
            let at = format!("matchLabels.{k}");
            if let Some(e) = (!later(k)).then(|| check_key(k).err()).flatten() {
                out.push((at.clone(), e));
            }
            if let Some(e) = (!later(v)).then(|| check_value(v).err()).flatten() {
                out.push((at, e));
            }
        }
        for (i, e) in self.match_expressions.iter().enumerate() {
            let at = format!("matchExpressions[{i}]");
            if !later(&e.key) {
                if let Err(m) = check_key(&e.key) {
                    out.push((format!("{at}.key"), m));
                }
            }
            let needs_values = matches!(e.operator, SelectorOperator::In | SelectorOperator::NotIn);
            if needs_values && e.values.is_empty() {
                out.push((
                    format!("{at}.values"),
                    format!("{:?} needs at least one value", e.operator),
                ));
            }
            if !needs_values && !e.values.is_empty() {
                out.push((
                    format!("{at}.values"),
                    format!("{:?} tests the key alone: give no values", e.operator),
                ));
            }
            for (j, v) in e.values.iter().enumerate() {
                if !later(v) {
                    if let Err(m) = check_value(v) {
                        out.push((format!("{at}.values[{j}]"), m));
                    }
                }
            }
        }
        out
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
    crate::text::bounded_alphanumeric(s, 63, |c| {
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

    #[test]
    fn the_structured_form_means_the_same_requirements() {
        let sel: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"env": "prod"},
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a", "b"]},
                {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
                {"key": "tier", "operator": "Exists"},
                {"key": "team", "operator": "NotIn", "values": ["x"]}
            ]
        }))
        .unwrap();
        let text =
            "env=prod,zone in (a,b),!node-role.kubernetes.io/control-plane,tier,team notin (x)";
        assert_eq!(sel.text(), text);
        assert_eq!(sel.parse().unwrap(), Selector::parse(text).unwrap());
        let l = labels(&[("env", "prod"), ("zone", "a"), ("tier", "web")]);
        assert!(sel.parse().unwrap().matches(&l));
        // An empty structured selector selects everything, as `""` does.
        let all: LabelSelector = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(all.parse().unwrap(), Selector::default());
        // The string form stays a string.
        let t: LabelSelector = serde_json::from_value(serde_json::json!("!zone")).unwrap();
        assert_eq!(t, LabelSelector::Text("!zone".into()));
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            serde_json::json!("!zone")
        );
    }

    #[test]
    fn structured_problems_name_their_place() {
        let sel: StructuredSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"bad key": "x", "ok": "${v}"},
            "matchExpressions": [
                {"key": "zone", "operator": "In"},
                {"key": "tier", "operator": "Exists", "values": ["a"]},
                {"key": "a", "operator": "NotIn", "values": ["ok", "not ok"]}
            ]
        }))
        .unwrap();
        let p = sel.problems(true);
        let at: Vec<&str> = p.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(
            at,
            [
                "matchLabels.bad key",
                "matchExpressions[0].values",
                "matchExpressions[1].values",
                "matchExpressions[2].values[1]"
            ],
            "{p:?}"
        );
        assert!(p[1].1.contains("In needs at least one value"), "{p:?}");
        // At run time `${v}` has been substituted; an unsubstituted one is no label value.
        assert_eq!(sel.problems(false).len(), 5);
        let e = LabelSelector::Structured(sel).parse().unwrap_err();
        assert!(e.reason.starts_with("matchLabels.bad key: "), "{e}");
    }
}
