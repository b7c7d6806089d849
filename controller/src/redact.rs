//! Redacting what a run read as data from a failure message before it reaches status, Events
//! or a bound object: an `exec` or `script` failure repeats the tail of the command's stderr,
//! and a command may print what it was given. A variable may hold what a command read from a
//! Secret (the controller cannot tell which do), and steps included from a Secret carry the
//! Secret's values as parameters, so every string of both is cut out of the message.

use std::collections::BTreeSet;

use pseudoflow_crd::protocol::StepResult;
use serde_json::Value;

use pseudoflow_walk::StoredRun;

/// Strings shorter than this are not redacted: `true`, `1`, `prod` are everywhere in messages,
/// and a message with every short word cut out would say nothing. A Secret's value this short
/// is not protected (docs/security.md).
pub const MIN_REDACTED: usize = 6;

/// What replaces a redacted value.
pub const REDACTED: &str = "[redacted]";

/// The strings of `v` (and each line of them; with `words`, each word too) long enough to
/// redact.
fn strings(v: &Value, words: bool, out: &mut BTreeSet<String>) {
    match v {
        Value::String(s) => {
            let lines = s.lines();
            let split = s.split_whitespace().filter(|_| words);
            for part in std::iter::once(s.as_str()).chain(lines).chain(split) {
                let part = part.trim();
                if part.chars().count() >= MIN_REDACTED {
                    out.insert(part.to_string());
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| strings(i, words, out)),
        Value::Object(map) => map.values().for_each(|i| strings(i, words, out)),
        _ => {}
    }
}

/// Every string `run` holds as data that may have come from a Secret: its variables, `result`'s
/// own, and the parameters of steps included from a Secret.
pub fn values(run: &StoredRun, result: &StepResult) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    run.vars.values().for_each(|v| strings(v, false, &mut out));
    result
        .vars
        .values()
        .for_each(|v| strings(v, false, &mut out));
    // A Secret's value is often one word of a step's parameter (`--password=...`).
    for included in run.includes.values().filter(|i| i.from_secret) {
        strings(&included.steps, true, &mut out);
    }
    // What the flow's own spec says (for a bound object's flow, the object's fields too) is
    // shown to whoever may read the flow anyway: a namespace name a loop went over is not cut
    // out of the message that names it.
    if let Some(spec) = run.spec.as_ref().map(Value::to_string) {
        out.retain(|v| !spec.contains(v.as_str()));
    }
    out
}

/// `message` with each of `values` (longest first, so a value containing another goes whole)
/// replaced by [`REDACTED`].
pub fn redact(message: &str, values: &BTreeSet<String>) -> String {
    let mut sorted: Vec<&String> = values.iter().collect();
    sorted.sort_by_key(|v| std::cmp::Reverse(v.len()));
    sorted
        .into_iter()
        .fold(message.to_string(), |m, v| m.replace(v.as_str(), REDACTED))
}

/// `result` with its message redacted when it failed (a success's message is the step's own
/// report, such as a `log` step's text, which may show variables by design).
pub fn failure(run: &StoredRun, result: StepResult) -> StepResult {
    if result.ok || result.message.is_empty() {
        return result;
    }
    let message = redact(&result.message, &values(run, &result));
    StepResult { message, ..result }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_failure_is_redacted_of_variables_and_secret_included_strings_but_a_success_is_not() {
        let mut run = StoredRun::default();
        run.vars.insert("pw".into(), json!("hunter2-canary"));
        run.vars.insert("env".into(), json!("prod"));
        run.vars
            .insert("many".into(), json!({"a": ["line-one\nline-two"]}));
        let included = serde_json::from_value(json!({
            "steps": [{"type": "exec", "cmd": "login --token tok-123456"}], "fromSecret": true
        }))
        .unwrap();
        run.includes.insert("n".into(), included);
        let failed = StepResult::failed(
            "exit 1: bad password hunter2-canary in prod; line-two; token tok-123456 and login --token tok-123456",
        );
        let m = failure(&run, failed).message;
        assert_eq!(
            m,
            "exit 1: bad password [redacted] in prod; [redacted]; token [redacted] and [redacted]"
        );
        let ok = StepResult::succeeded(false, "said hunter2-canary");
        assert_eq!(failure(&run, ok.clone()), ok);
    }
}
