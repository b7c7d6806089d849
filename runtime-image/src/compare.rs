//! The comparison behind `if`, `when` and `waitFor: Custom`: text equality and containment,
//! numeric order for numbers and Kubernetes quantities, and the rule for missing values; and
//! how what was compared is shown: a value read from a Secret never is (its field is named).

use pseudoflow_crd::common::{parse_number_or_quantity, Op};
use pseudoflow_crd::jsonpath::JsonPath;
use serde_json::Value;

/// Compares what a jsonPath found (`None` when the object or the path is missing) with the
/// expected value. Missing is false for every op except `notEquals`, where it is true.
/// `greaterThan`/`lessThan` on values that are not numbers or quantities is an error.
pub fn compare(op: Op, actual: Option<&str>, expected: &str) -> Result<bool, CompareError> {
    let Some(actual) = actual else {
        return Ok(op == Op::NotEquals);
    };
    Ok(match op {
        Op::Equals => actual == expected,
        Op::NotEquals => actual != expected,
        Op::Contains => actual.contains(expected),
        Op::GreaterThan | Op::LessThan => {
            let (a, b) = numbers(op, actual, expected)?;
            if op == Op::GreaterThan {
                a > b
            } else {
                a < b
            }
        }
    })
}

fn numbers(op: Op, actual: &str, expected: &str) -> Result<(f64, f64), CompareError> {
    let parse = |s: &str| parse_number_or_quantity(s);
    match (parse(actual), parse(expected)) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(CompareError::NotNumbers {
            op,
            actual: actual.to_string(),
            expected: expected.to_string(),
        }),
    }
}

/// Whether the values a comparison read may be shown in its result, a timeout or an error
/// (status, Events and the pod's log, all readable with `view`): not when they were read from a
/// Secret, whose values stay in Secrets (docs/security.md#secrets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// Values are quoted (`.status.phase is "Pending"`).
    Values,
    /// The object is a Secret: only the field is named, and what it is compared with is not
    /// quoted either (it may be a `${...}` holding the value).
    FieldOnly,
}

impl Shown {
    /// [`Shown::FieldOnly`] for the core `Secret` kind, else [`Shown::Values`].
    pub fn for_kind(group: &str, kind: &str) -> Shown {
        if group.is_empty() && kind == "Secret" {
            Shown::FieldOnly
        } else {
            Shown::Values
        }
    }

    /// What `json_path` found, for a message: `.status.phase is "Pending"`, `… is missing`,
    /// or, for a Secret, `{.data.pw} of the Secret is set (its value is not shown)`.
    pub fn found(self, json_path: &str, actual: Option<&str>) -> String {
        match (self, actual) {
            (_, None) => format!("{json_path} is missing"),
            (Shown::Values, Some(a)) => format!("{json_path} is {a:?}"),
            (Shown::FieldOnly, Some(_)) => {
                format!("{json_path} of the Secret is set (its value is not shown)")
            }
        }
    }

    /// What a value is compared with, for a message: `Equals "Running"`, or for a Secret only
    /// the op.
    pub fn wanted(self, op: Op, expected: &str) -> String {
        match self {
            Shown::Values => format!("{op:?} {expected:?}"),
            Shown::FieldOnly => format!("{op:?} a value not shown"),
        }
    }
}

/// Why a condition could not be evaluated (as opposed to evaluating to false).
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// An order comparison of values that are neither numbers nor quantities.
    #[error("{op:?} compares numbers or quantities, but got {actual:?} and {expected:?}")]
    NotNumbers {
        /// The comparison asked for.
        op: Op,
        /// What the jsonPath found.
        actual: String,
        /// What the condition expects.
        expected: String,
    },
    /// [`CompareError::NotNumbers`] on a Secret's field: names the field, quotes neither value.
    #[error(
        "{op:?} compares numbers or quantities, but {json_path} of the Secret or the value it is \
         compared with is not one (a Secret's values are not shown)"
    )]
    SecretNotNumbers {
        /// The comparison asked for.
        op: Op,
        /// The field compared.
        json_path: String,
    },
    /// The condition's jsonPath does not parse.
    #[error(transparent)]
    Path(#[from] pseudoflow_crd::jsonpath::JsonPathError),
}

/// Evaluates `jsonPath op value` on an object (`None` = the object does not exist); an error
/// quotes the values only when `shown` allows it.
pub fn evaluate(
    object: Option<&Value>,
    json_path: &str,
    op: Op,
    expected: &str,
    shown: Shown,
) -> Result<(bool, Option<String>), CompareError> {
    let path = JsonPath::parse(json_path)?;
    let actual = object.and_then(|o| path.eval_text(o));
    let holds = compare(op, actual.as_deref(), expected).map_err(|e| match (shown, e) {
        (Shown::FieldOnly, CompareError::NotNumbers { op, .. }) => CompareError::SecretNotNumbers {
            op,
            json_path: json_path.to_string(),
        },
        (_, e) => e,
    })?;
    Ok((holds, actual))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const V: Shown = Shown::Values;

    #[test]
    fn text_ops() {
        assert!(compare(Op::Equals, Some("Running"), "Running").unwrap());
        assert!(!compare(Op::Equals, Some("Pending"), "Running").unwrap());
        assert!(compare(Op::NotEquals, Some("Pending"), "Running").unwrap());
        assert!(compare(Op::Contains, Some("a b c"), "b").unwrap());
        assert!(!compare(Op::Contains, Some("a b c"), "d").unwrap());
    }

    #[test]
    fn numeric_and_quantity_order() {
        assert!(compare(Op::GreaterThan, Some("10Gi"), "2048Mi").unwrap());
        assert!(compare(Op::LessThan, Some("500m"), "1").unwrap());
        assert!(compare(Op::GreaterThan, Some("3"), "2.5").unwrap());
        assert!(!compare(Op::LessThan, Some("3"), "3").unwrap());
    }

    #[test]
    fn non_numbers_are_an_error_not_a_string_comparison() {
        let e = compare(Op::GreaterThan, Some("ten"), "2").unwrap_err();
        assert!(e.to_string().contains("\"ten\""), "{e}");
        assert!(compare(Op::LessThan, Some("1"), "x").is_err());
    }

    #[test]
    fn missing_values_are_false_except_for_not_equals() {
        for op in [Op::Equals, Op::Contains, Op::GreaterThan, Op::LessThan] {
            assert!(!compare(op, None, "1").unwrap(), "{op:?}");
        }
        assert!(compare(Op::NotEquals, None, "1").unwrap());
    }

    #[test]
    fn evaluate_reads_paths_filters_and_missing_objects() {
        let pod = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Scheduled", "status": "True"}
        ]}});
        let ready = r#"{.status.conditions[?(@.type=="Ready")].status}"#;
        assert_eq!(
            evaluate(Some(&pod), ready, Op::Equals, "True", V).unwrap(),
            (true, Some("True".into()))
        );
        assert!(
            !evaluate(Some(&pod), ".status.podIP", Op::Equals, "", V)
                .unwrap()
                .0
        );
        assert!(
            evaluate(Some(&pod), ".status.podIP", Op::NotEquals, "x", V)
                .unwrap()
                .0
        );
        assert!(
            !evaluate(None, ".status.phase", Op::Equals, "Running", V)
                .unwrap()
                .0
        );
        assert!(
            evaluate(None, ".status.phase", Op::NotEquals, "Running", V)
                .unwrap()
                .0
        );
        let node = json!({"status": {"capacity": {"memory": "16Gi"}}});
        assert!(
            evaluate(
                Some(&node),
                ".status.capacity.memory",
                Op::GreaterThan,
                "8Gi",
                V
            )
            .unwrap()
            .0
        );
        assert!(evaluate(Some(&pod), "{.status.phase", Op::Equals, "x", V).is_err());
    }

    #[test]
    fn a_secrets_values_are_never_shown_only_its_field() {
        let secret = json!({"data": {"pw": "cHctc2VjcmV0", "pin": "cXp4dw=="}});
        let hidden = Shown::for_kind("", "Secret");
        assert_eq!(hidden, Shown::FieldOnly);
        assert_eq!(Shown::for_kind("example.com", "Secret"), Shown::Values);
        assert_eq!(Shown::for_kind("", "ConfigMap"), Shown::Values);
        let (holds, actual) =
            evaluate(Some(&secret), "{.data.pw}", Op::Equals, "x", hidden).unwrap();
        assert!(!holds);
        let found = hidden.found("{.data.pw}", actual.as_deref());
        let wanted = hidden.wanted(Op::Equals, "x");
        assert_eq!(
            found,
            "{.data.pw} of the Secret is set (its value is not shown)"
        );
        assert_eq!(wanted, "Equals a value not shown");
        assert_eq!(hidden.found("{.data.x}", None), "{.data.x} is missing");
        let e = evaluate(
            Some(&secret),
            "{.data.pin}",
            Op::GreaterThan,
            "1000",
            hidden,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("{.data.pin} of the Secret"), "{e}");
        assert!(!e.contains("cXp4dw") && !e.contains("1000"), "{e}");
        let shown = Shown::Values.found("{.data.pw}", actual.as_deref());
        assert_eq!(shown, "{.data.pw} is \"cHctc2VjcmV0\"");
    }
}
