//! What others wrote (a flow's or object's status message, a step's output, a pod's log line)
//! is printed on the operator's terminal: a control character in it could clear the screen,
//! retitle the terminal or add a fake row. Every such cell and line goes through [`printable`].

/// `s` with each control character (terminal escapes, newlines) written as `\u{..}`/`\n`.
/// Idempotent: what it writes holds no control character.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_once_and_the_rest_kept() {
        let s = "ok \u{1b}]0;owned\u{7}\nfake row\tx\r é";
        let p = printable(s);
        assert_eq!(p, "ok \\u{1b}]0;owned\\u{7}\\nfake row\\tx\\r é");
        assert!(!p.chars().any(char::is_control));
        assert_eq!(printable(&p), p);
    }
}
