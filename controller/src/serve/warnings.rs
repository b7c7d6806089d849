//! A flow's compile warnings (an opt-out of quoting on tenant data, an unquoted step output)
//! in `status.warnings` and one Warning Event per change, so that Argo CD and
//! `kubectl describe` show what the admission webhook told only whoever applied the flow.

use pseudoflow_compiler::Compiled;
use pseudoflow_crd::status::MAX_WARNINGS_SHOWN;
use serde_json::{json, Value};

use crate::flow::events::EventType;
use crate::flow::{outcome, Error, Reconciling};
use crate::limits::{bounded, MAX_STATUS_MESSAGE_CHARS};

/// Reason of the Event told when a flow's compile warnings change.
pub const REASON: &str = "CompileWarnings";

/// Writes `status.warnings` when it differs from what `previous` holds, and tells the change
/// in an Event (none when the warnings are gone).
pub(crate) async fn publish(r: &Reconciling<'_, ()>, compiled: &Compiled) -> Result<(), Error> {
    let now = shown(compiled);
    let before: Vec<String> = r.previous["warnings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|w| w.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if now == before {
        return Ok(());
    }
    let value = if now.is_empty() {
        Value::Null
    } else {
        json!(now)
    };
    outcome::patch_status(&r.flows, r.flow_id.name, json!({ "warnings": value })).await?;
    if !now.is_empty() {
        let note = format!("{} warning(s): {}", now.len(), now.join("; "));
        r.publish(EventType::Warning, REASON, &note).await;
    }
    Ok(())
}

/// The warnings as status shows them: `path: message`, at most [`MAX_WARNINGS_SHOWN`].
pub fn shown(compiled: &Compiled) -> Vec<String> {
    compiled
        .warnings
        .warnings()
        .take(MAX_WARNINGS_SHOWN)
        .map(|d| {
            bounded(
                &format!("{}: {}", d.path, d.message),
                MAX_STATUS_MESSAGE_CHARS,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    #[test]
    fn warnings_are_shown_with_their_paths_and_bounded_in_number() {
        let id = pseudoflow_compiler::FlowId {
            name: "f",
            namespace: Some("ns"),
        };
        let steps: Vec<Value> = (0..15)
            .map(|_| json!({"type": "exec", "cmd": "echo ${object | raw}"}))
            .collect();
        let spec = json!({"bind": {"apiVersion": "example.com/v1", "kind": "Db"},
            "shellQuoting": "quoted", "steps": steps});
        let c = pseudoflow_compiler::compile(&id, &spec).unwrap();
        let shown = super::shown(&c);
        assert_eq!(shown.len(), super::MAX_WARNINGS_SHOWN);
        assert!(
            shown[0].starts_with("spec.steps[0].cmd: ${object | raw} opts out of quoting"),
            "{shown:?}"
        );
    }
}
