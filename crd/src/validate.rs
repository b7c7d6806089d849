//! Validation of a whole flow in two passes, reporting every problem at once:
//! 1. *structural*: the raw JSON is walked against each step type's generated schema, so type
//!    mismatches, missing and unknown fields are reported with their path even inside nested
//!    step lists (which the CRD schema cannot describe);
//! 2. *semantic*: each step type checks what a schema cannot (regexes, selectors, jsonPaths,
//!    ranges), and list-level rules (an `onError` needs a step before it, ...) are applied.

use serde_json::Value;

use crate::check::Ctx;
use crate::diagnostics::Diagnostics;
use crate::spec::PseudoFlowSpec;
use crate::step::Step;
use crate::step_schema::{nested_fields, nested_lists};
use crate::steps::registry;
use crate::text::is_dns_subdomain;

/// Validates a raw `spec` (as JSON) and returns the typed spec when there is no error.
///
/// Both passes always run, so a type error in one step does not hide a structural mistake in
/// another: the semantic pass works on the raw lists and checks each step that parses.
pub fn validate_spec(raw: &Value) -> (Option<PseudoFlowSpec>, Diagnostics) {
    let mut diags = Diagnostics::default();
    // First, without recursion: every pass below recurses once per level of the flow.
    if !crate::depth::check_depth(raw, "spec", &mut diags) {
        return (None, diags);
    }
    crate::schema::check_spec_structure(raw, "spec", &mut diags);
    let mut ctx = Ctx::new("spec", &mut diags);
    if let Some(vars) = raw.get("vars").and_then(Value::as_object) {
        for name in vars.keys() {
            ctx.var_name(&format!("vars.{name}"), name);
        }
    }
    for field in ["steps", "onDelete"] {
        if let Some(list) = raw.get(field).and_then(Value::as_array) {
            check_steps(list, &mut ctx.at(field));
        }
    }
    crate::steps::approval::check_unique_names(raw, &mut ctx);
    if let Some(sa) = raw.get("serviceAccountName").and_then(Value::as_str) {
        if !is_dns_subdomain(sa) {
            ctx.error(
                "serviceAccountName",
                format!("{sa:?} is not a valid ServiceAccount name"),
            );
        }
    }
    if diags.has_errors() {
        return (None, diags);
    }
    let spec = match <PseudoFlowSpec as serde::Deserialize>::deserialize(raw) {
        Ok(s) => s,
        Err(e) => {
            diags.error("spec", format!("cannot read the flow: {e}"));
            return (None, diags);
        }
    };
    let mut ctx = Ctx::new("spec", &mut diags);
    for (i, a) in spec.artifacts.iter().enumerate() {
        a.validate(&mut ctx.at(&format!("artifacts[{i}]")));
    }
    if let Some(executor) = &spec.options.executor {
        executor.validate(&mut ctx.at("options.executor"));
    }
    check_schedule(&spec, &mut ctx);
    check_bind(&spec, &mut ctx);
    check_include_only(&spec, &mut ctx);
    let ok = !diags.has_errors();
    (ok.then_some(spec), diags)
}

/// `bind` is valid and not combined with what it replaces; `bound` only beside no `bind`.
fn check_bind(spec: &PseudoFlowSpec, ctx: &mut Ctx) {
    if let Some(rollout) = &spec.rollout {
        rollout.validate(&mut ctx.at("rollout"));
        if spec.bind.is_none() {
            ctx.error(
                "rollout",
                "only a flow bound to a kind (spec.bind) has revisions to roll out",
            );
        }
    }
    let Some(bind) = &spec.bind else {
        return;
    };
    bind.validate(&mut ctx.at("bind"));
    if spec.schedule.is_some() {
        ctx.error(
            "schedule",
            "a flow bound to a kind runs for its objects' changes, not on a schedule",
        );
    }
    if spec.bound.is_some() {
        ctx.error(
            "bound",
            "is set by the controller on the flows it makes; remove it",
        );
    }
    for name in spec.bound_vars() {
        if spec.vars.contains_key(*name) {
            ctx.error(
                &format!("vars.{name}"),
                format!("{name:?} is the bound object's variable in a flow bound to a kind"),
            );
        }
    }
}

/// A library flow (`includeOnly`) has nothing that would run it on its own.
fn check_include_only(spec: &PseudoFlowSpec, ctx: &mut Ctx) {
    if !spec.include_only {
        return;
    }
    let never_runs = "a flow with includeOnly never runs on its own";
    if spec.schedule.is_some() {
        ctx.error("schedule", format!("{never_runs}: it has no schedule"));
    }
    if spec.bind.is_some() {
        ctx.error("bind", format!("{never_runs}: it cannot serve a kind"));
    }
    if spec.on_delete.is_some() {
        ctx.error(
            "onDelete",
            format!("{never_runs}, so it has nothing to undo when deleted; put onDelete in the flows that include it"),
        );
    }
}

/// `schedule` parses in `timeZone`; `timeZone` and `startingDeadlineSeconds` only beside it.
fn check_schedule(spec: &PseudoFlowSpec, ctx: &mut Ctx) {
    match spec.parsed_schedule() {
        Some(Err(e)) => ctx.error(e.field(), e.to_string()),
        Some(Ok(_)) => {}
        None => {
            if spec.time_zone.is_some() {
                ctx.error("timeZone", "a time zone needs spec.schedule");
            }
            if spec.starting_deadline_seconds.is_some() {
                ctx.error(
                    "startingDeadlineSeconds",
                    "a starting deadline needs spec.schedule",
                );
            }
        }
    }
}

/// Semantic checks of one raw list of steps and of every nested list below it: list rules
/// (`onError` needs a step before it, `when` a step after it), then each step that parses.
pub fn check_steps(steps: &[Value], ctx: &mut Ctx) {
    if steps.is_empty() {
        ctx.error("", "a step list must not be empty");
    }
    let type_of = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    for (i, raw) in steps.iter().enumerate() {
        let mut sctx = ctx.at(&format!("[{i}]"));
        let ty = type_of(raw);
        match ty.as_str() {
            "onError" if i == 0 => sctx.error(
                "type",
                "onError handles the failure of the step right before it, but it is the first step of its list",
            ),
            "onError" if type_of(&steps[i - 1]) == "onError" => {
                sctx.error("type", "onError cannot follow another onError")
            }
            "onError" if steps[i - 1].get("continueOnError") == Some(&Value::Bool(true)) => sctx.error(
                "type",
                "the step before this onError has continueOnError: true, so its failure never reaches the handler",
            ),
            "when" if i + 1 == steps.len() => sctx.error(
                "type",
                "when guards the step after it, but it is the last step of its list",
            ),
            "when" if matches!(type_of(&steps[i + 1]).as_str(), "when" | "onError") => sctx.error(
                "type",
                format!("when must be followed by the step it guards, not by {}", type_of(&steps[i + 1])),
            ),
            _ => {}
        }
        if ty == "onError" && raw.get("timeoutSeconds").is_some() {
            sctx.error(
                "timeoutSeconds",
                "onError has no work of its own to time out (it only routes a failure to its \
                 steps): set timeoutSeconds on its steps, or wrap them in a parallel or retry",
            );
        }
        if let Some(step) = shallow_step(raw) {
            if step.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
                sctx.error("name", "must not be blank");
            }
            if ty == "includeFlow" {
                crate::steps::include_flow::check_flow_name(&mut sctx, step.name.as_deref());
            }
            step.kind.params().validate(&mut sctx);
        }
        let node_context = sctx.in_node_context || ty == "loopNodes";
        for (field, list) in nested_lists(&ty, raw) {
            let mut cctx = sctx.at(&field);
            cctx.in_node_context = node_context;
            check_steps(list, &mut cctx);
        }
    }
}

/// The step with its nested lists emptied, so its own fields can be checked even when a
/// nested step is broken (nested steps are checked on their own).
fn shallow_step(raw: &Value) -> Option<Step> {
    serde_json::from_value(without_nested_steps(raw)).ok()
}

/// A step's own fields with every nested step list emptied: what the work of the step itself
/// needs (a loop's start, an `if`'s condition), without its body.
pub fn without_nested_steps(raw: &Value) -> Value {
    let Some(obj) = raw.as_object() else {
        return raw.clone();
    };
    let ty = raw.get("type").and_then(Value::as_str).unwrap_or_default();
    let nested = nested_fields(ty);
    let shallow = obj
        .iter()
        .map(|(k, v)| match nested.iter().find(|(f, _)| f == k) {
            Some((_, "branches")) => (k.clone(), serde_json::json!([[]])),
            Some(_) => (k.clone(), serde_json::json!([])),
            None => (k.clone(), v.clone()),
        })
        .collect();
    Value::Object(shallow)
}

/// Registered step type names, for hints.
pub fn step_type_names() -> impl Iterator<Item = &'static str> {
    registry::STEP_TYPES.iter().copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::suggest;

    #[test]
    fn suggestions_find_near_typos_only() {
        assert_eq!(suggest("aply", step_type_names()), Some("apply"));
        assert_eq!(suggest("waitfor", step_type_names()), Some("waitFor"));
        assert_eq!(
            suggest("configfiles", step_type_names()),
            Some("configFile")
        );
        assert_eq!(suggest("kubernetes", step_type_names()), None);
    }

    #[test]
    fn an_include_only_flow_cannot_have_what_would_run_it() {
        let spec = serde_json::json!({"includeOnly": true, "schedule": "* * * * *",
            "onDelete": [{"type": "log", "message": "x"}],
            "steps": [{"type": "log", "message": "x"}]});
        let (_, diags) = validate_spec(&spec);
        let paths: Vec<&str> = diags.errors().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["spec.schedule", "spec.onDelete"], "{diags}");
        let ok =
            serde_json::json!({"includeOnly": true, "steps": [{"type": "log", "message": "x"}]});
        assert!(!validate_spec(&ok).1.has_errors());
    }

    #[test]
    fn a_rollout_needs_bind_and_a_history_limit_in_range() {
        let log = serde_json::json!([{"type": "log", "message": "x"}]);
        let bind = serde_json::json!({"apiVersion": "example.com/v1", "kind": "Gadget"});
        let paths = |spec: Value| {
            let (_, diags) = validate_spec(&spec);
            diags.errors().map(|d| d.path.clone()).collect::<Vec<_>>()
        };
        let unbound = serde_json::json!({"steps": log, "rollout": {"revisionHistoryLimit": 3}});
        assert_eq!(paths(unbound), ["spec.rollout"]);
        let bound = serde_json::json!({"steps": log, "bind": bind,
            "rollout": {"revisionHistoryLimit": 0}});
        assert_eq!(paths(bound), Vec::<String>::new());
        let many = serde_json::json!({"steps": log, "bind": bind,
            "rollout": {"revisionHistoryLimit": 101}});
        assert_eq!(paths(many), ["spec.rollout.revisionHistoryLimit"]);
        let waves = serde_json::json!({"steps": log, "bind": bind,
            "rollout": {"waves": [1, 0, "10%", "5%", "x", "100%"], "maxFailures": 2}});
        assert_eq!(
            paths(waves),
            [
                "spec.rollout.waves[1]",
                "spec.rollout.waves[3]",
                "spec.rollout.waves[4]"
            ]
        );
        let none_allowed = serde_json::json!({"steps": log, "bind": bind,
            "rollout": {"maxFailures": 0}});
        assert_eq!(paths(none_allowed), ["spec.rollout.maxFailures"]);
    }

    #[test]
    fn a_bad_schedule_or_time_zone_is_an_error_naming_its_field() {
        use serde_json::json;
        let errors = |extra: Value| {
            let mut spec = serde_json::json!({"steps": [{"type": "log", "message": "x"}]});
            spec.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let (ok, diags) = validate_spec(&spec);
            let paths: Vec<String> = diags.errors().map(|d| d.path.clone()).collect();
            (ok.is_some(), paths)
        };
        assert_eq!(
            errors(json!({"schedule": "*/5 * * * *", "timeZone": "Europe/Berlin"})),
            (true, vec![])
        );
        assert_eq!(
            errors(json!({"schedule": "*/10 * * * * *", "suspend": true})),
            (true, vec![])
        );
        assert_eq!(
            errors(json!({"schedule": "every day"})),
            (false, vec!["spec.schedule".to_string()])
        );
        assert_eq!(
            errors(json!({"schedule": "* * * * *", "timeZone": "Nowhere/City"})),
            (false, vec!["spec.timeZone".to_string()])
        );
        assert_eq!(
            errors(json!({"timeZone": "Etc/UTC"})),
            (false, vec!["spec.timeZone".to_string()])
        );
        assert_eq!(
            errors(json!({"startingDeadlineSeconds": 10})),
            (false, vec!["spec.startingDeadlineSeconds".to_string()])
        );
    }
}
