//! `Task::Condition`: read the condition's object with the flow's identity and evaluate its
//! jsonPath test. A missing object counts as a missing path (see [`crate::compare`]). The
//! result names what was seen, but never a Secret's value ([`Shown`]).

use pseudoflow_crd::common::Condition;
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::{Step, StepKind};

use crate::api;
use crate::compare::{evaluate, Shown};
use crate::context::ExecCtx;
use crate::error::StepError;

/// The condition of an `if` or `when` step.
pub fn condition_of(step: &Step) -> Result<&Condition, StepError> {
    match &step.kind {
        StepKind::If(s) => Ok(&s.condition),
        StepKind::When(s) => Ok(&s.condition),
        other => Err(StepError::input(format!(
            "task condition needs an if or when step, got {}",
            other.type_name()
        ))),
    }
}

/// Evaluates the step's condition.
pub async fn run(ctx: &ExecCtx, step: &Step) -> Result<StepResult, StepError> {
    let c = condition_of(step)?;
    let res = &c.resource;
    api::require_name("condition.resource.name", &res.name)?;
    let api_version = api::api_version_for(res.api_version.as_deref(), &res.kind)?;
    let resolved = api::resolve_opt(ctx, &api_version, &res.kind, false).await?;
    let shown = match &resolved {
        Some(r) => api::shown(r),
        None => Shown::Values,
    };
    let object = match resolved {
        None => None,
        Some(r) => {
            let ns = api::namespace_for(ctx, &r, res.namespace.as_deref());
            let api = api::api_for(ctx, &r, ns.as_deref()).await?;
            api::get_opt(ctx, &api, &r, &res.name, ns.as_deref())
                .await?
                .map(|o| api::to_json(&o))
        }
    };
    let (holds, actual) = evaluate(object.as_ref(), &c.json_path, c.op, &c.value, shown)
        .map_err(StepError::failed)?;
    let seen = match &object {
        None => format!("{} {} does not exist", res.kind, res.name),
        Some(_) => shown.found(&c.json_path, actual.as_deref()),
    };
    let mut r = StepResult::succeeded(false, format!("{seen}: condition is {holds}"));
    r.condition = Some(holds);
    Ok(r)
}
