//! `compile`: validation (structure, semantics, expressions, include cycles) then DAG
//! construction. Pure and deterministic: the same spec gives the same plan, byte for byte.

use pseudoflow_crd::validate::validate_spec;
use pseudoflow_crd::{Diagnostics, PseudoFlowSpec, Step};
use serde_json::Value;

use crate::dag::{build_plan, Budget, Expansions};
use crate::limits::PlanLimits;
use crate::plan::Plan;

/// A flow that passed validation, ready to run.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The typed spec validation produced (defaults applied), what the plan was built from.
    pub spec: PseudoFlowSpec,
    /// The DAG of `spec.steps`.
    pub plan: Plan,
    /// The DAG of `spec.onDelete`, run behind the finalizer when the flow is deleted.
    pub on_delete: Option<Plan>,
    /// Problems that do not stop the flow (e.g. `${HOME}` left for the shell).
    pub warnings: Diagnostics,
}

/// Identity of the flow being compiled, for rules that depend on it (self-inclusion).
#[derive(Debug, Clone, Default)]
pub struct FlowId<'a> {
    /// The flow's name: a flow including itself by name is refused.
    pub name: &'a str,
    /// Its namespace (None offline): an `includeFlow` without one means this namespace.
    pub namespace: Option<&'a str>,
}

/// Validates `raw_spec` and builds its plan; on any error returns every diagnostic found.
pub fn compile(flow: &FlowId, raw_spec: &Value) -> Result<Compiled, Diagnostics> {
    compile_expanded(flow, raw_spec, &Expansions::new())
}

/// [`compile`], with the steps includes fetched so far in place; a plan that outgrows a limit
/// with them (more steps, deeper nesting) is refused with the path of the first step beyond.
pub fn compile_expanded(
    flow: &FlowId,
    raw_spec: &Value,
    expansions: &Expansions,
) -> Result<Compiled, Diagnostics> {
    compile_with(flow, raw_spec, expansions, PlanLimits::default())
}

/// [`compile_expanded`] under explicit plan limits (the benchmark lifts them).
pub fn compile_with(
    flow: &FlowId,
    raw_spec: &Value,
    expansions: &Expansions,
    limits: PlanLimits,
) -> Result<Compiled, Diagnostics> {
    let (spec, mut diags) = validate_spec(raw_spec);
    let Some(mut spec) = spec else {
        return Err(diags);
    };
    crate::expr::check_with_includes(&spec, expansions, &mut diags);
    check_self_include(flow, &spec.steps, "spec.steps", &mut diags);
    if diags.has_errors() {
        return Err(diags);
    }
    let mut budget = Budget::new(limits);
    let api_steps = crate::placement::ApiStepsIn::of(&spec);
    let mut plan = build_plan(
        &spec.steps,
        "spec.steps",
        "",
        expansions,
        &mut budget,
        api_steps,
    );
    let mut on_delete = spec
        .on_delete
        .as_deref()
        .map(|s| build_plan(s, "spec.onDelete", "d", expansions, &mut budget, api_steps));
    crate::record::resolve(&mut spec, &mut plan, on_delete.as_mut(), &mut budget.diags);
    if budget.diags.has_errors() {
        diags.extend(budget.diags);
        return Err(diags);
    }
    Ok(Compiled {
        spec,
        plan,
        on_delete,
        warnings: diags,
    })
}

/// Validates steps an `include` or `includeFlow` fetched, as strictly as a flow's own steps, with
/// every diagnostic's path under `at` (the including step's `<path>.included`).
pub fn validate_included(raw_steps: &Value, at: &str) -> Result<Vec<Step>, Diagnostics> {
    let raw = serde_json::json!({ "steps": raw_steps });
    let (spec, mut diags) = validate_spec(&raw);
    if let Some(spec) = &spec {
        crate::expr::check_expressions(spec, &mut diags);
    }
    for d in &mut diags.0 {
        if let Some(rest) = d.path.strip_prefix("spec.steps") {
            d.path = format!("{at}{rest}");
        }
    }
    match spec {
        Some(spec) if !diags.has_errors() => Ok(spec.steps),
        _ => Err(diags),
    }
}

/// A flow that includes itself would never end; cycles through other flows are found at run
/// time by the controller, which sees the other flows.
fn check_self_include(flow: &FlowId, steps: &[Step], path: &str, diags: &mut Diagnostics) {
    for (i, step) in steps.iter().enumerate() {
        let here = format!("{path}[{i}]");
        if let (Some(target), pseudoflow_crd::StepKind::IncludeFlow(p)) =
            (step.included_flow(), &step.kind)
        {
            let same_ns =
                p.namespace.as_deref().is_none() || p.namespace.as_deref() == flow.namespace;
            if target == flow.name && same_ns {
                diags.error(
                    format!("{here}.name"),
                    format!("flow {:?} includes itself; that would never end", flow.name),
                );
            }
        }
        for (field, children) in step.kind.params().children() {
            check_self_include(
                flow,
                children,
                &pseudoflow_crd::text::join(&here, &field),
                diags,
            );
        }
    }
}
