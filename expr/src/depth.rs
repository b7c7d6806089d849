//! A bound on how deeply values nest. The run state is stored as JSON and read back with
//! serde_json, which refuses input nested deeper than 128 levels: a variable nested that deep
//! would make the run unloadable and restart it on every reconcile. Values that expressions
//! produce and that become variables are therefore refused past [`MAX_DEPTH`] levels.

use serde_json::Value;

/// Deepest nesting a variable may have (a scalar is depth 0, `[1]` is depth 1): the bound the
/// validator puts on values in a step ([`pseudoflow_crd::limits::MAX_VALUE_DEPTH`]), kept once.
pub const MAX_DEPTH: usize = pseudoflow_crd::limits::MAX_VALUE_DEPTH;

/// A value nested deeper than allowed; `at` is where the limit was passed (`$[0].a[2]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("value nests deeper than {max} levels (at {at})")]
pub struct DepthError {
    /// The bound that was passed.
    pub max: usize,
    /// Where inside the value it was passed (`$.a.b[0]`), to find it in a large value.
    pub at: String,
}

/// Checks that `value` nests at most `max` levels of arrays and objects. Iterative, so any
/// input can be checked without exhausting the stack. Also for the controller to call on
/// values it folds from executor results before they become variables.
pub fn check_depth(value: &Value, max: usize) -> Result<(), DepthError> {
    let mut stack: Vec<(&Value, usize, String)> = vec![(value, 0, "$".to_string())];
    while let Some((v, depth, at)) = stack.pop() {
        let children: Vec<(&Value, String)> = match v {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, c)| (c, format!("{at}[{i}]")))
                .collect(),
            Value::Object(map) => map.iter().map(|(k, c)| (c, format!("{at}.{k}"))).collect(),
            _ => continue,
        };
        if depth >= max {
            return Err(DepthError { max, at });
        }
        for (c, p) in children {
            if c.is_array() || c.is_object() {
                stack.push((c, depth + 1, p));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |v, _| json!([v]))
    }

    #[test]
    fn values_up_to_the_limit_pass() {
        assert!(check_depth(&json!(1), 0).is_ok());
        assert!(check_depth(&nested(32), 32).is_ok());
        assert!(check_depth(&json!({"a": {"b": [1, 2]}}), 3).is_ok());
    }

    #[test]
    fn deeper_values_fail_naming_where() {
        let e = check_depth(&nested(33), 32).unwrap_err();
        assert_eq!(e.at, format!("${}", "[0]".repeat(32)));
        let e = check_depth(&json!({"a": {"b": [[1]]}}), 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "value nests deeper than 3 levels (at $.a.b[0])"
        );
    }

    #[test]
    fn a_value_deeper_than_serde_json_reads_back_is_refused() {
        // 127 levels serialise but are refused on reading back by serde_json's default limit
        // once wrapped in the run state; the bound stops them long before.
        let v = nested(127);
        assert!(check_depth(&v, MAX_DEPTH).is_err());
    }
}
