//! `${ x | oneline }`: a value written into a line-based file (a node's config file) stays on
//! its line. A tenant's line break would add a line of their own to a root-owned file, so the
//! compiler asks for this filter on tenant data in `configFile.content` and `patchFile.replace`
//! (docs/decisions.md#tenant-data-never-chooses-where-a-step-acts).

use minijinja::value::Value;
use minijinja::{Error, ErrorKind};

/// `oneline`: the value unchanged, or an error when its text holds a line break (`\n`, `\r`).
/// The error does not quote the value (it may be a secret).
pub fn oneline(value: Value) -> Result<Value, Error> {
    let breaks = match value.as_str() {
        Some(s) => s.contains(['\n', '\r']),
        None => value.to_string().contains(['\n', '\r']),
    };
    if breaks {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "oneline: the value holds a line break, which would add a line to the file",
        ));
    }
    Ok(value)
}

/// True when the expression's outermost operation is the `oneline` filter: its whole result
/// is refused if it spans lines.
pub fn is_oneline(expr: &str) -> bool {
    crate::shell::outermost_filter(expr).as_deref() == Some("oneline")
}
