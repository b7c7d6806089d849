//! The object's status, written right after each reconcile of its child flow (by the dispatch,
//! [`crate::serve`]: that is where the run's phase and outputs are known), through the object's
//! status subresource and as the flow's ServiceAccount: `phase` (Creating while a run runs,
//! Running when it succeeded, Failed with `message`), the fields the flow declares, and
//! Ready/Progressing/Degraded.

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use pseudoflow_compiler::expr::Scope;
use pseudoflow_crd::bind::{Bound, OBJECT_VAR, TRIGGER_VAR};
use pseudoflow_crd::{FlowPhase, PseudoFlowSpec, PseudoFlowStatus};
use serde_json::{json, Map, Value};
use tracing::warn;

use super::Binder;
use crate::flow::Reconciling;

/// The object's phase for a child flow's phase.
pub fn object_phase(phase: Option<FlowPhase>) -> &'static str {
    match phase {
        Some(FlowPhase::Succeeded) => "Running",
        Some(FlowPhase::Failed | FlowPhase::Aborted) => "Failed",
        _ => "Creating",
    }
}

/// The status to merge into the object (without times: see [`with_times`]): the phase, the
/// message, `fields` and the conditions. The message of a failed run is its failure; otherwise
/// it is null (so an old failure goes), unless the flow declares a `message` field: then it is
/// that field once a run succeeded and is left as it was meanwhile (seed 004 says how its
/// restore went there, and a later run that restores nothing keeps it).
pub fn object_status(
    bound: &Bound,
    phase: Option<FlowPhase>,
    message: Option<&str>,
    fields: Map<String, Value>,
) -> Value {
    let p = object_phase(phase);
    let mut out = fields;
    if !bound.status.phase_field.is_empty() {
        out.insert(bound.status.phase_field.clone(), json!(p));
    }
    if p == "Failed" {
        let failed = message.unwrap_or("the flow's run failed");
        out.insert("message".into(), json!(failed));
    } else if !bound.status.fields.contains_key("message") {
        out.insert("message".into(), Value::Null);
    }
    if bound.status.conditions {
        let generation = bound.object["metadata"]["generation"].as_i64();
        let said = message.unwrap_or(p);
        let cond = |ty: &str, on: bool| {
            json!({"type": ty, "status": if on { "True" } else { "False" }, "reason": p,
                "message": said, "observedGeneration": generation})
        };
        out.insert(
            "conditions".into(),
            json!([
                cond("Ready", p == "Running"),
                cond("Progressing", p == "Creating"),
                cond("Degraded", p == "Failed"),
            ]),
        );
    }
    Value::Object(out)
}

/// `status` with `lastTransitionTime` set on each condition (required by the standard type).
pub fn with_times(mut status: Value, now: &str) -> Value {
    if let Some(conds) = status["conditions"].as_array_mut() {
        for c in conds {
            c["lastTransitionTime"] = json!(now);
        }
    }
    status
}

/// The declared `fields`, rendered over the run's variables once the run succeeded; one that
/// renders to `none` is left out, so its last value stays.
pub(super) fn rendered_fields(
    r: &Reconciling<'_, Binder>,
    spec: &PseudoFlowSpec,
    bound: &Bound,
    succeeded: bool,
    run_vars: &BTreeMap<String, Value>,
) -> Map<String, Value> {
    let mut out = Map::new();
    if !succeeded {
        return out;
    }
    let mut scope: Scope = spec
        .vars
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    scope.insert(OBJECT_VAR.into(), bound.object.clone());
    scope.insert(TRIGGER_VAR.into(), bound.trigger.clone());
    scope.extend(run_vars.clone());
    for (key, expr) in &bound.status.fields {
        let path = format!("spec.bind.status.fields.{key}");
        match r.ctx.engine.substitute_str(expr, &scope, &path) {
            Ok((Value::Null, _)) => {}
            Ok((v, _)) => {
                out.insert(key.clone(), v);
            }
            Err(e) => warn!(flow = %r.key(), "status field {key}: {e}"),
        }
    }
    out
}

/// Writes the object's status for the child flow's `status`, unless it is what was last
/// written. A refusal is logged and reported as an Event on the child, never fails its run.
pub(crate) async fn write_back(
    r: &Reconciling<'_, Binder>,
    spec: &PseudoFlowSpec,
    status: &PseudoFlowStatus,
    run_vars: &BTreeMap<String, Value>,
) {
    let Some(bound) = spec.bound.as_ref().filter(|b| b.status.writes_anything()) else {
        return;
    };
    let succeeded = status.phase == Some(FlowPhase::Succeeded);
    let fields = rendered_fields(r, spec, bound, succeeded, run_vars);
    let wanted = object_status(bound, status.phase, status.message.as_deref(), fields);
    let digest = pseudoflow_compiler::names::stable_hash(&[&wanted.to_string()]);
    let binder = r.own;
    if binder.written.lock().expect("not poisoned").get(r.uid) == Some(&digest) {
        return;
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"status": with_times(wanted, &now)});
    match patch_object_status(r, spec, bound, &patch).await {
        Ok(()) => {
            let mut written = binder.written.lock().expect("not poisoned");
            written.insert(r.uid.to_string(), digest);
        }
        Err(e) => {
            let note = format!("writing the status of its object: {e}");
            warn!(flow = %r.key(), "{note}");
            let ty = crate::flow::events::EventType::Warning;
            r.publish(ty, "StatusWriteFailed", &note).await;
        }
    }
}

async fn patch_object_status(
    r: &Reconciling<'_, Binder>,
    spec: &PseudoFlowSpec,
    bound: &Bound,
    patch: &Value,
) -> Result<(), String> {
    let sa = spec.service_account_name.as_deref().unwrap_or("default");
    let client = r.ctx.accounts.client_as(r.ns(), sa)?;
    let obj = &bound.object;
    let ar = super::object::resource_of(obj, &bound.plural);
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    };
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound() -> Bound {
        serde_json::from_value(
            json!({"object": {"metadata": {"name": "pg", "generation": 4}},
            "trigger": {"event": "create"}, "plural": "databases"}),
        )
        .unwrap()
    }

    #[test]
    fn phases_map_to_the_seeds_values_with_conditions() {
        let s = object_status(&bound(), Some(FlowPhase::Running), None, Map::new());
        assert_eq!(s["phase"], "Creating");
        assert_eq!(s["message"], Value::Null);
        assert_eq!(s["conditions"][1]["type"], "Progressing");
        assert_eq!(s["conditions"][1]["status"], "True");
        assert_eq!(s["conditions"][0]["observedGeneration"], 4);
        let s = object_status(&bound(), Some(FlowPhase::Succeeded), None, Map::new());
        assert_eq!(
            (s["phase"].as_str(), s["conditions"][0]["status"].as_str()),
            (Some("Running"), Some("True"))
        );
        let s = object_status(&bound(), Some(FlowPhase::Failed), Some("boom"), Map::new());
        assert_eq!(
            (s["phase"].as_str(), s["message"].as_str()),
            (Some("Failed"), Some("boom"))
        );
        assert_eq!(s["conditions"][2]["status"], "True");
        let s = with_times(s, "2026-01-01T00:00:00Z");
        assert_eq!(
            s["conditions"][2]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
    }

    #[test]
    fn an_empty_phase_field_writes_no_phase_and_conditions_can_be_off() {
        let mut b = bound();
        b.status.phase_field = String::new();
        b.status.conditions = false;
        let s = object_status(&b, Some(FlowPhase::Succeeded), None, Map::new());
        assert_eq!(s, json!({"message": null}));
    }

    #[test]
    fn a_declared_message_is_written_on_success_kept_meanwhile_and_replaced_by_a_failure() {
        let mut b = bound();
        b.status.conditions = false;
        b.status.fields.insert("message".into(), "${said}".into());
        let said = Map::from_iter([("message".to_string(), json!("Restoring DB have succeed"))]);
        let s = object_status(&b, Some(FlowPhase::Succeeded), None, said);
        assert_eq!(
            s,
            json!({"phase": "Running", "message": "Restoring DB have succeed"})
        );
        let s = object_status(&b, Some(FlowPhase::Running), None, Map::new());
        assert_eq!(s, json!({"phase": "Creating"}), "left as it was");
        let s = object_status(&b, Some(FlowPhase::Failed), Some("boom"), Map::new());
        assert_eq!(s, json!({"phase": "Failed", "message": "boom"}));
    }
}
