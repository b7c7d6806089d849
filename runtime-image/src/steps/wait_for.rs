//! `waitFor`: watch one object until it exists, is gone, is Ready, Available, Healthy, or
//! passes a custom jsonPath test. Every observation is noted, so a timeout says what it saw
//! (of a Secret, the field, never its value).

use pseudoflow_crd::common::Op;
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::steps::wait_for::{WaitCondition, WaitForStep};

use crate::api;
use crate::compare::{evaluate, Shown};
use crate::context::ExecCtx;
use crate::error::StepError;
use crate::readiness::{self, Seen};

/// Runs a `waitFor` step (the caller enforces the timeout, default 300 s).
pub async fn run(ctx: &ExecCtx, step: &WaitForStep) -> Result<StepResult, StepError> {
    let res = &step.resource;
    api::require_name("resource.name", &res.name)?;
    let api_version = api::api_version_for(res.api_version.as_deref(), &res.kind)?;
    let r = api::resolve(ctx, &api_version, &res.kind).await?;
    let ns = api::namespace_for(ctx, &r, res.namespace.as_deref());
    let api = api::api_for(ctx, &r, ns.as_deref()).await?;
    let label = api::display(&res.kind, ns.as_deref(), &res.name);
    ctx.waiting_for(format!("{label} to be {:?}", step.condition));
    let call = api::call("get", &r, &res.name, ns.as_deref());
    let shown = api::shown(&r);
    crate::watch::watch_until_with(ctx, api, call, step.interval_seconds, |o| {
        let json = o.map(api::to_json);
        let seen = judge(step, (&res.kind, shown), json.as_ref())?;
        Ok(Seen {
            done: seen.done,
            note: format!("{label}: {}", seen.note),
        })
    })
    .await?;
    Ok(StepResult::succeeded(
        false,
        format!("{label} is {:?}", step.condition),
    ))
}

/// The verdict on one observation (None = the object does not exist) of an object of `kind`,
/// whose values are shown as `shown` allows.
pub fn judge(
    step: &WaitForStep,
    (kind, shown): (&str, Shown),
    obj: Option<&serde_json::Value>,
) -> Result<Seen, StepError> {
    let Some(obj) = obj else {
        return Ok(Seen {
            done: step.condition == WaitCondition::Deleted,
            note: "does not exist".into(),
        });
    };
    Ok(match step.condition {
        WaitCondition::Exist => Seen {
            done: true,
            note: "exists".into(),
        },
        WaitCondition::Deleted => Seen {
            done: false,
            note: "still exists".into(),
        },
        WaitCondition::Ready => readiness::ready(obj),
        WaitCondition::Available => readiness::available(kind, obj),
        WaitCondition::Healthy => readiness::healthy(kind, obj),
        WaitCondition::Custom => {
            let path = step.json_path.as_deref().unwrap_or_default();
            let op = step.op.unwrap_or(Op::Equals);
            let want = step.value.as_deref().unwrap_or_default();
            let (done, actual) =
                evaluate(Some(obj), path, op, want, shown).map_err(StepError::failed)?;
            let found = shown.found(path, actual.as_deref());
            Seen {
                done,
                note: format!("{found}, want {}", shown.wanted(op, want)),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const POD: (&str, Shown) = ("Pod", Shown::Values);

    fn step(v: serde_json::Value) -> WaitForStep {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn exist_and_deleted() {
        let s = step(json!({"resource": {"kind": "Pod", "name": "p"}, "condition": "Deleted"}));
        assert!(judge(&s, POD, None).unwrap().done);
        assert!(!judge(&s, POD, Some(&json!({}))).unwrap().done);
        let s = step(json!({"resource": {"kind": "Pod", "name": "p"}, "condition": "Exist"}));
        assert!(!judge(&s, POD, None).unwrap().done);
        assert!(judge(&s, POD, Some(&json!({}))).unwrap().done);
    }

    #[test]
    fn custom_reports_what_it_saw_and_rejects_non_numbers() {
        let s = step(
            json!({"resource": {"kind": "Pod", "name": "p"}, "condition": "Custom",
            "jsonPath": ".status.phase", "op": "equals", "value": "Running"}),
        );
        let seen = judge(&s, POD, Some(&json!({"status": {"phase": "Pending"}}))).unwrap();
        assert!(!seen.done);
        assert_eq!(
            seen.note,
            ".status.phase is \"Pending\", want Equals \"Running\""
        );
        let s = step(
            json!({"resource": {"kind": "Pod", "name": "p"}, "condition": "Custom",
            "jsonPath": ".status.phase", "op": "greaterThan", "value": "3"}),
        );
        assert!(judge(&s, POD, Some(&json!({"status": {"phase": "Pending"}}))).is_err());
    }

    #[test]
    fn custom_on_a_secret_names_the_field_never_a_value() {
        let s = step(
            json!({"resource": {"kind": "Secret", "name": "db"}, "condition": "Custom",
            "jsonPath": "{.data.pw}", "op": "equals", "value": "hunter2"}),
        );
        let secret = ("Secret", Shown::FieldOnly);
        let seen = judge(&s, secret, Some(&json!({"data": {"pw": "cHctc2VjcmV0"}}))).unwrap();
        assert!(!seen.done);
        assert_eq!(
            seen.note,
            "{.data.pw} of the Secret is set (its value is not shown), want Equals a value not shown"
        );
        let s = step(
            json!({"resource": {"kind": "Secret", "name": "db"}, "condition": "Custom",
            "jsonPath": "{.data.pw}", "op": "greaterThan", "value": "3"}),
        );
        let e = judge(&s, secret, Some(&json!({"data": {"pw": "cHctc2VjcmV0"}}))).unwrap_err();
        assert!(!e.to_string().contains("cHctc2VjcmV0"), "{e}");
        assert!(e.to_string().contains("{.data.pw}"), "{e}");
    }
}
