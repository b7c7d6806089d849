//! The comparison behind `if`, `when` and `waitFor: Custom`: text equality and containment,
//! numeric order for numbers and Kubernetes quantities, and the rule for missing values.

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
    /// The condition's jsonPath does not parse.
    #[error(transparent)]
    Path(#[from] pseudoflow_crd::jsonpath::JsonPathError),
}

/// Evaluates `jsonPath op value` on an object (`None` = the object does not exist).
pub fn evaluate(
    object: Option<&Value>,
    json_path: &str,
    op: Op,
    expected: &str,
) -> Result<(bool, Option<String>), CompareError> {
    let path = JsonPath::parse(json_path)?;
    let actual = object.and_then(|o| path.eval_text(o));
    let holds = compare(op, actual.as_deref(), expected)?;
    Ok((holds, actual))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            evaluate(Some(&pod), ready, Op::Equals, "True").unwrap(),
            (true, Some("True".into()))
        );
        assert!(
            !evaluate(Some(&pod), ".status.podIP", Op::Equals, "")
                .unwrap()
                .0
        );
        assert!(
            evaluate(Some(&pod), ".status.podIP", Op::NotEquals, "x")
                .unwrap()
                .0
        );
        assert!(
            !evaluate(None, ".status.phase", Op::Equals, "Running")
                .unwrap()
                .0
        );
        assert!(
            evaluate(None, ".status.phase", Op::NotEquals, "Running")
                .unwrap()
                .0
        );
        let node = json!({"status": {"capacity": {"memory": "16Gi"}}});
        assert!(
            evaluate(
                Some(&node),
                ".status.capacity.memory",
                Op::GreaterThan,
                "8Gi"
            )
            .unwrap()
            .0
        );
        assert!(evaluate(Some(&pod), "{.status.phase", Op::Equals, "x").is_err());
    }
}
