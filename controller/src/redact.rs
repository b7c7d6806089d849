//! Redacting what a run read as data from a failure message before it reaches status, Events
//! or a bound object: an `exec` or `script` failure repeats the tail of the command's stderr,
//! and a command may print what it was given. A variable may hold what a command read from a
//! Secret (the controller cannot tell which do), and steps included from a Secret carry the
//! Secret's values as parameters, so every string of both is cut out of the message: anywhere
//! it stands when it is long, as a whole word when it is short (a four-digit PIN is cut out of
//! `wrong pin 4821`, not out of `exit 14821`).

use std::collections::BTreeSet;

use pseudoflow_crd::protocol::StepResult;
use serde_json::Value;

use pseudoflow_walk::StoredRun;

/// Strings at least this long are redacted wherever they stand in a message.
pub const MIN_REDACTED: usize = 6;

/// Strings shorter than [`MIN_REDACTED`] but at least this long are redacted only where they
/// stand as a whole word (not inside a longer run of letters and digits): `prod` or a PIN is cut
/// out of `deploying to prod` but a message is not shredded wherever its letters happen to
/// spell it. Shorter ones (`1`, `ok`) are not redacted at all: a Secret that short protects
/// nothing (docs/security.md).
pub const MIN_REDACTED_WORD: usize = 3;

/// What replaces a redacted value.
pub const REDACTED: &str = "[redacted]";

/// The strings of `v` (and each line of them; with `words`, each word of at least
/// [`MIN_REDACTED`] characters too) long enough to redact.
fn strings(v: &Value, words: bool, out: &mut BTreeSet<String>) {
    match v {
        Value::String(s) => {
            // A whole value (or line) may be short; a word split out of a longer string must
            // be long, or every `exec` and `--name` of an included step would be cut.
            let whole = std::iter::once(s.as_str()).chain(s.lines());
            let whole = whole.map(|p| (p, MIN_REDACTED_WORD));
            let split = s.split_whitespace().filter(|_| words);
            for (part, min) in whole.chain(split.map(|p| (p, MIN_REDACTED))) {
                let part = part.trim();
                if part.chars().count() >= min {
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
    // What the flow's author wrote is shown to whoever may read the flow anyway: a namespace
    // name a loop went over is not cut out of the message that names it.
    if let Some(spec) = run.spec.as_ref().map(authored) {
        out.retain(|v| !spec.contains(v.as_str()));
    }
    out
}

/// The part of a run's spec its flow's author wrote, as text: without `bound` (the bound
/// object, what changed in it, its related objects' versions), which whoever may write an
/// object of the bound kind chooses. Were it trusted, a tenant would pad the object with every
/// guess of a PIN and have the PIN spared from redaction.
fn authored(spec: &Value) -> String {
    match spec {
        Value::Object(map) if map.contains_key("bound") => {
            let mut map = map.clone();
            map.remove("bound");
            Value::Object(map).to_string()
        }
        other => other.to_string(),
    }
}

/// `message` with each of `values` (longest first, so a value containing another goes whole)
/// replaced by [`REDACTED`]: anywhere when it is [`MIN_REDACTED`] long, else where it stands as a
/// whole word.
pub fn redact(message: &str, values: &BTreeSet<String>) -> String {
    let mut sorted: Vec<&String> = values.iter().collect();
    sorted.sort_by_key(|v| std::cmp::Reverse(v.len()));
    sorted.into_iter().fold(message.to_string(), |m, v| {
        if v.chars().count() >= MIN_REDACTED {
            m.replace(v.as_str(), REDACTED)
        } else {
            replace_words(&m, v)
        }
    })
}

/// `text` with each occurrence of `word` that no letter or digit touches replaced.
fn replace_words(text: &str, word: &str) -> String {
    let word_char = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for (at, _) in text.match_indices(word) {
        if at < rest {
            continue;
        }
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        if word_char(before) || word_char(after) {
            continue;
        }
        out.push_str(&text[rest..at]);
        out.push_str(REDACTED);
        rest = at + word.len();
    }
    out.push_str(&text[rest..]);
    out
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
            "exit 1: bad password [redacted] in [redacted]; [redacted]; token [redacted] and [redacted]"
        );
        let ok = StepResult::succeeded(false, "said hunter2-canary");
        assert_eq!(failure(&run, ok.clone()), ok);
    }

    #[test]
    fn a_short_value_is_redacted_where_it_stands_as_a_word_and_nowhere_else() {
        let mut run = StoredRun::default();
        run.vars.insert("pin".into(), json!("4821"));
        run.vars.insert("flag".into(), json!("ok"));
        let failed = StepResult::failed(
            "exit 2: wrong pin 4821 (pin=4821); id 148210 and x4821 kept; ok stays",
        );
        let m = failure(&run, failed).message;
        assert_eq!(
            m,
            "exit 2: wrong pin [redacted] (pin=[redacted]); id 148210 and x4821 kept; ok stays"
        );
    }

    #[test]
    fn a_value_the_bound_object_holds_is_still_redacted() {
        let mut run = StoredRun::default();
        run.vars.insert("pin".into(), json!("4821"));
        let guesses: Vec<String> = (0..10_000).map(|n| format!("{n:04}")).collect();
        run.spec = Some(json!({
            "steps": [{"type": "exec", "cmd": "login"}],
            "bound": {"object": {"spec": {"guesses": guesses}},
                      "trigger": {"event": "update", "changed": [".spec.4821"]}},
        }));
        let m = failure(&run, StepResult::failed("exit 1: wrong pin 4821")).message;
        assert_eq!(m, "exit 1: wrong pin [redacted]");
    }

    #[test]
    fn a_short_value_the_flow_spells_out_is_not_redacted() {
        let mut run = StoredRun::default();
        run.vars.insert("env".into(), json!("prod"));
        run.spec = Some(json!({"steps": [{"type": "log", "message": "to prod"}]}));
        let m = failure(&run, StepResult::failed("exit 1: deploying to prod failed")).message;
        assert_eq!(m, "exit 1: deploying to prod failed");
    }
}
