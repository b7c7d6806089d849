//! How `kubectl pf` shows a flow, whichever command asks: its phase, a duration, a padded table,
//! and the header above a flow's table. Shared by `get` (a flow's steps) and `bound` (a bound
//! flow's objects), so neither imports the other's rendering.

use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pseudoflow_crd::PseudoFlowStatus;

use crate::escape::printable;

/// The flow's phase as shown (`Pending` before its first status).
pub fn phase(st: &PseudoFlowStatus) -> String {
    st.phase
        .map(|p| format!("{p:?}"))
        .unwrap_or_else(|| "Pending".into())
}

/// Columns padded to their widest cell; the last column is not padded. Every cell is printed
/// with its control characters escaped ([`printable`]): status messages, step and object
/// names are written by others.
pub fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let rows: Vec<[String; N]> = rows
        .iter()
        .map(|r| r.clone().map(|c| printable(&c)))
        .collect();
    let rows = rows.as_slice();
    let mut width = [0usize; N];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == N {
                line.push_str(c);
            } else {
                let _ = write!(line, "{c:<w$}   ", w = width[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `12s`, `3m4s`, `2h5m`, `3d4h`.
pub fn human(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}

pub fn duration(
    start: Option<&Time>,
    end: Option<&Time>,
    now: k8s_openapi::jiff::Timestamp,
) -> String {
    match (start, end) {
        (Some(s), Some(e)) => human(e.0.as_second() - s.0.as_second()),
        (Some(s), None) => format!("{} so far", human(now.as_second() - s.0.as_second())),
        _ => "-".into(),
    }
}

/// The lines above the table: the flow and its phase, the current run, the flow's message
/// (what status carries printed escaped, [`printable`]).
pub fn header(
    ns: &str,
    name: &str,
    st: &PseudoFlowStatus,
    now: k8s_openapi::jiff::Timestamp,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}/{}  {}{}",
        ns,
        name,
        phase(st),
        st.reason
            .as_ref()
            .filter(|r| **r != phase(st))
            .map(|r| format!(" ({})", printable(r)))
            .unwrap_or_default()
    );
    if let Some(run) = &st.run {
        let _ = writeln!(
            out,
            "run {}  generation {}  {}{}",
            run.id,
            run.generation,
            duration(run.started_at.as_ref(), run.finished_at.as_ref(), now),
            run.trigger
                .as_ref()
                .map(|t| format!("  trigger {}", printable(t)))
                .unwrap_or_default()
        );
    }
    if let Some(m) = &st.message {
        let _ = writeln!(out, "message: {}", printable(m));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pseudoflow_crd::FlowPhase;

    #[test]
    fn attack_control_characters_in_list_and_get_cells_are_printed_escaped() {
        // `list` and `get` rows: a status message written by whoever may write status (or put
        // text into a step's failure), with a screen clear and a fake row.
        let evil = "failed\u{1b}[2J\u{1b}]0;owned\u{7}\nns/other  Succeeded";
        let rows = [
            ["NAME".to_string(), "MESSAGE".into()],
            ["f\u{1b}[31m".to_string(), evil.to_string()],
        ];
        let out = table(&rows);
        assert_eq!(out.lines().count(), 2, "{out}");
        assert!(
            !out.replace('\n', "").chars().any(char::is_control),
            "{out:?}"
        );
        assert!(
            out.contains("failed\\u{1b}[2J\\u{1b}]0;owned\\u{7}\\nns/other  Succeeded"),
            "{out}"
        );
        // Widths count what is printed.
        assert!(
            out.lines()
                .nth(1)
                .unwrap()
                .starts_with("f\\u{1b}[31m   failed"),
            "{out}"
        );
    }

    #[test]
    fn attack_control_characters_in_get_header_are_printed_escaped() {
        let st = PseudoFlowStatus {
            phase: Some(FlowPhase::Failed),
            reason: Some("Bad\u{1b}[2J".into()),
            message: Some("boom\r\nfake: line\u{1b}[0m".into()),
            ..Default::default()
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let out = header("ns", "f", &st, now);
        assert_eq!(out.lines().count(), 2, "{out}");
        assert!(
            !out.replace('\n', "").chars().any(char::is_control),
            "{out:?}"
        );
        assert!(out.contains("(Bad\\u{1b}[2J)"), "{out}");
        assert!(
            out.contains("message: boom\\r\\nfake: line\\u{1b}[0m"),
            "{out}"
        );
    }
}
