//! How deeply a JSON text nests, found without recursion (so without a depth limit of its own):
//! one pass over the bytes with a stack of where it is, for a message that names the path.

/// The text nests deeper than allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: nested deeper than {limit} levels; the controller does not read JSON this deep")]
pub struct TooDeep {
    /// Where the limit was passed, from `root` (its first segments when that is long).
    pub path: String,
    /// The nesting allowed.
    pub limit: usize,
}

/// Segments of the path shown before an ellipsis.
const SHOWN_SEGMENTS: usize = 6;

enum Frame {
    Object(Option<String>),
    Array(usize),
}

/// Checks that the (valid) JSON text `raw` nests at most `limit` arrays and objects deep; `root`
/// names the document in the path (`spec`). Malformed text is not judged here: the parser that
/// reads it next says what is wrong.
pub fn check(raw: &str, root: &str, limit: usize) -> Result<(), TooDeep> {
    let bytes = raw.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i + 1;
                i = start;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                let text = raw.get(start..i.min(bytes.len())).unwrap_or_default();
                // A string directly followed by ':' is an object's key.
                let mut j = i + 1;
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                if bytes.get(j) == Some(&b':') {
                    if let Some(Frame::Object(key)) = stack.last_mut() {
                        *key = Some(text.to_string());
                    }
                }
            }
            open @ (b'[' | b'{') => {
                if stack.len() == limit {
                    return Err(TooDeep {
                        path: path(root, &stack),
                        limit,
                    });
                }
                stack.push(if open == b'[' {
                    Frame::Array(0)
                } else {
                    Frame::Object(None)
                });
            }
            b']' | b'}' => {
                stack.pop();
            }
            b',' => {
                if let Some(Frame::Array(n)) = stack.last_mut() {
                    *n += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// `root.key[0]…` for the frames on `stack` (the outermost is `root` itself).
fn path(root: &str, stack: &[Frame]) -> String {
    let mut out = root.to_string();
    for (n, frame) in stack.iter().enumerate() {
        if n == SHOWN_SEGMENTS {
            out.push('…');
            break;
        }
        match frame {
            Frame::Object(Some(key)) => {
                out.push('.');
                out.push_str(key);
            }
            Frame::Object(None) => {}
            Frame::Array(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn depth_up_to_the_limit_passes_and_one_more_fails() {
        assert_eq!(check(&nested(64), "spec", 64), Ok(()));
        assert!(check(&nested(65), "spec", 64).is_err());
        assert_eq!(check("1", "spec", 0), Ok(()));
        assert!(check("{}", "spec", 0).is_err());
    }

    #[test]
    fn the_path_names_keys_and_indices_where_the_limit_is_passed() {
        let spec = json!({"vars": {"a": "[[[["}, "steps": [
            {"type": "log", "message": "x,y"},
            {"type": "loop", "forEach": [[[[1]]]]}
        ]});
        let err = check(&spec.to_string(), "spec", 5).unwrap_err();
        assert_eq!(err.path, "spec.steps[1].forEach[0][0]");
        assert_eq!(err.limit, 5);
        assert!(err.to_string().contains("deeper than 5 levels"), "{err}");
    }

    #[test]
    fn brackets_and_escaped_quotes_in_strings_do_not_count() {
        let text = json!({"a": "[[[[[[\"{{{{", "b": ["\\", "]]]"]}).to_string();
        assert_eq!(check(&text, "spec", 2), Ok(()));
    }

    #[test]
    fn a_long_path_is_shown_by_its_first_segments() {
        let err = check(&nested(10_000), "spec", 64).unwrap_err();
        assert_eq!(err.path, "spec[0][0][0][0][0][0]…");
    }

    #[test]
    fn a_depth_far_beyond_serde_json_limit_is_scanned_without_recursion() {
        // serde_json itself refuses this; the scan must still answer (and not overflow).
        let deep = nested(1_000_000);
        assert!(serde_json::from_str::<serde_json::Value>(&deep).is_err());
        assert!(check(&deep, "spec", 64).is_err());
    }
}
