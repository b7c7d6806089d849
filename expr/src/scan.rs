//! Finding `${...}` in a string: `$${` is an escape for a literal `${`, and the expression ends
//! at the `}` that balances its braces outside quotes (so `${ {'a': 1}['a'] }` and
//! `${x.split('}')}` work).

/// A piece of a scanned string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Text to keep as is (escapes already resolved).
    Literal(String),
    /// The text between `${` and its `}`.
    Expr(String),
}

/// An unterminated `${`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unterminated ${{ at byte {offset}")]
pub struct ScanError {
    /// Byte offset of the `${` that is never closed.
    pub offset: usize,
}

/// Splits `s` into literal text and expressions.
pub fn scan(s: &str) -> Result<Vec<Segment>, ScanError> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut lit = String::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"$${") {
            lit.push_str("${");
            i += 3;
        } else if bytes[i..].starts_with(b"${") {
            let end = find_close(s, i + 2).ok_or(ScanError { offset: i })?;
            if !lit.is_empty() {
                out.push(Segment::Literal(std::mem::take(&mut lit)));
            }
            out.push(Segment::Expr(s[i + 2..end].to_string()));
            i = end + 1;
        } else {
            let ch = s[i..].chars().next().expect("in bounds");
            lit.push(ch);
            i += ch.len_utf8();
        }
    }
    if !lit.is_empty() {
        out.push(Segment::Literal(lit));
    }
    Ok(out)
}

/// True when `s` contains at least one `${...}` (not counting `$${` escapes).
pub fn has_expressions(s: &str) -> bool {
    scan(s)
        .map(|segs| segs.iter().any(|x| matches!(x, Segment::Expr(_))))
        .unwrap_or(true)
}

fn find_close(s: &str, from: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (off, c) in s[from..].char_indices() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '{' => depth += 1,
            '}' if depth == 0 => return Some(from + off),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(s: &str) -> Segment {
        Segment::Expr(s.into())
    }
    fn l(s: &str) -> Segment {
        Segment::Literal(s.into())
    }

    #[test]
    fn splits_literals_and_expressions() {
        assert_eq!(scan("a ${x} b").unwrap(), vec![l("a "), e("x"), l(" b")]);
        assert_eq!(scan("${x}${y}").unwrap(), vec![e("x"), e("y")]);
        assert_eq!(scan("plain").unwrap(), vec![l("plain")]);
    }

    #[test]
    fn escape_gives_a_literal() {
        assert_eq!(
            scan("$${HOME} and ${x}").unwrap(),
            vec![l("${HOME} and "), e("x")]
        );
    }

    #[test]
    fn braces_and_quotes_inside_expressions() {
        assert_eq!(
            scan("${ {'a': 1}['a'] }").unwrap(),
            vec![e(" {'a': 1}['a'] ")]
        );
        assert_eq!(
            scan("${x.split('}')}!").unwrap(),
            vec![e("x.split('}')"), l("!")]
        );
    }

    #[test]
    fn unterminated_is_an_error_with_offset() {
        assert_eq!(scan("ab ${x").unwrap_err().offset, 3);
    }
}
