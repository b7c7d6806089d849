//! Steps that `include` and `includeFlow` fetch at run time. The fetch Job returns them raw; they
//! are validated here, kept in the run state (so a restarted controller, or a changed source,
//! does not change a running run), and the flow is compiled again with them as the fetching
//! step's body. Variables of an included flow are scoped to its steps. Pure: the controller
//! fetches and stores, this decides.

use std::collections::BTreeMap;

use pseudoflow_crd::steps::include::IncludeSource;
use pseudoflow_crd::{Diagnostics, StepKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::depth::{self, TooDeep};
use crate::limits::{MAX_INCLUDE_DEPTH, MAX_PLAN_NODES, MAX_SPEC_DEPTH};
use pseudoflow_compiler::plan::{NodeKind, Plan, PlanNode};
use pseudoflow_compiler::{compile_expanded, validate_included, Compiled, Expansions, FlowId};

/// What one include step fetched.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Included {
    /// The steps, raw as fetched (validated before they were stored).
    pub steps: Value,
    /// For `includeFlow`: the included flow's `spec.vars`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// Whether the steps came from a Secret: their strings are then redacted from failure
    /// messages (`controller::redact`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_secret: bool,
}

impl Included {
    /// `sha256:` of the steps as JSON with keys sorted and no spaces: what a step's `digest:`
    /// pins, and what the run's status shows for the step.
    pub fn digest(&self) -> String {
        steps_digest(&self.steps)
    }
}

/// `sha256:` of `steps` as JSON with keys sorted (serde_json's maps are ordered) and no spaces.
pub fn steps_digest(steps: &Value) -> String {
    let text = serde_json::to_string(steps).unwrap_or_default();
    format!(
        "sha256:{}",
        pseudoflow_compiler::names::content_digest(text.as_bytes())
    )
}

/// Why fetched steps cannot become a step's body.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum IncludeError {
    /// An includeFlow reads a flow that (transitively) includes it.
    #[error("includeFlow cycle: {0}")]
    Cycle(String),
    /// An include reads a source an enclosing include already read.
    #[error("include cycle: {0}")]
    SourceCycle(String),
    /// Too many includes inside one another.
    #[error("includes nested more than {MAX_INCLUDE_DEPTH} deep")]
    Nested,
    /// The fetched steps nest deeper than a spec may.
    #[error(transparent)]
    Deep(#[from] TooDeep),
    /// The plan would grow past its bound.
    #[error("the included steps would grow the flow to {0} DAG nodes, more than the limit of {MAX_PLAN_NODES}")]
    TooLarge(usize),
    /// The fetched steps are not valid steps.
    #[error("the included steps are invalid: {0}")]
    Invalid(String),
    /// The steps fetched are not the ones the step pins.
    #[error("the included steps' digest is {got}, not the {expected} the step pins (digest:); whoever may change the source changed them since")]
    Unpinned {
        /// What the step's `digest:` says.
        expected: String,
        /// The digest of what was fetched.
        got: String,
    },
    /// A later loop item fetched other steps than an earlier one.
    #[error("fetched different steps than for an earlier loop item; an include inside a loop must bring the same steps for every item")]
    Differs,
}

/// Why a run's spec with its stored includes does not compile (the spec was valid when the run
/// started and the includes when they were stored, so only a changed compiler gets here).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ExpandError(#[from] pub Diagnostics);

/// The flow compiled with every stored include expanded.
pub fn expand(
    flow: &FlowId,
    raw_spec: &Value,
    includes: &BTreeMap<String, Included>,
) -> Result<Compiled, ExpandError> {
    let mut expansions = Expansions::new();
    for (id, inc) in includes {
        let steps = validate_included(&inc.steps, id)?;
        expansions.insert(id.clone(), steps);
    }
    Ok(compile_expanded(flow, raw_spec, &expansions)?)
}

/// Checks the stored includes for tenant data with the flow (`spec`), as the flow's own steps
/// were at admission: a pod setting taken from it is refused, naming the included step's path.
/// Done when an include is accepted, so the including step fails instead of the run being
/// unable to expand.
pub fn check_tenant_data(
    spec: &pseudoflow_crd::PseudoFlowSpec,
    includes: &BTreeMap<String, Included>,
) -> Result<(), String> {
    let mut expansions = Expansions::new();
    for (id, inc) in includes {
        let steps = validate_included(&inc.steps, id).map_err(|d| d.to_string())?;
        expansions.insert(id.clone(), steps);
    }
    let mut diags = pseudoflow_crd::Diagnostics::default();
    pseudoflow_compiler::expr::check_with_includes(spec, &expansions, &mut diags);
    let errors: Vec<String> = diags
        .errors()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Checks what `node` (an include or includeFlow start) fetched before it is stored under its id.
pub fn accept(
    plan: &Plan,
    root: &str,
    node: &PlanNode,
    fetched: Included,
    includes: &mut BTreeMap<String, Included>,
) -> Result<usize, IncludeError> {
    let enclosing = enclosing_includes(plan, node);
    if enclosing.len() >= MAX_INCLUDE_DEPTH {
        return Err(IncludeError::Nested);
    }
    if let Some(source) = source_of(node) {
        // The same source inside itself fetches itself again, forever (twice per level under
        // a parallel: exponentially many Jobs).
        let outer: Vec<String> = enclosing
            .iter()
            .rev()
            .filter_map(|n| source_of(n))
            .collect();
        if let Some(first) = outer.iter().position(|s| *s == source) {
            let mut chain = outer[first..].to_vec();
            chain.push(source);
            return Err(IncludeError::SourceCycle(chain.join(" → ")));
        }
    }
    if let NodeKind::IncludeFlow { .. } = &node.kind {
        let mut chain: Vec<String> = enclosing_flows(plan, node)
            .iter()
            .rev()
            .map(|n| target(n, root))
            .collect();
        chain.insert(0, root.to_string());
        let next = target(node, root);
        if chain.contains(&next) {
            chain.push(next);
            return Err(IncludeError::Cycle(chain.join(" → ")));
        }
    }
    if let Some(expected) = pinned_digest(node) {
        let got = fetched.digest();
        if got != expected {
            let expected = expected.to_string();
            return Err(IncludeError::Unpinned { expected, got });
        }
    }
    let at = format!("{}.included", node.path);
    // Kept in the run state, which must read back: no deeper than a flow's own spec.
    let text = serde_json::to_string(&fetched.steps).unwrap_or_default();
    depth::check(&text, &at, MAX_SPEC_DEPTH)?;
    let steps = validate_included(&fetched.steps, &at).map_err(|d| {
        let errors: Vec<String> = d
            .errors()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect();
        IncludeError::Invalid(errors.join("; "))
    })?;
    // Included steps count as nesting: past the compiler's bound the flow would no longer compile.
    let deepest = step_depth(&node.path).saturating_add(nested_depth(&fetched.steps));
    if deepest > pseudoflow_compiler::limits::MAX_STEP_DEPTH {
        return Err(IncludeError::Nested);
    }
    let grown = plan.len().saturating_add(plan_size(&fetched.steps));
    if grown > MAX_PLAN_NODES {
        return Err(IncludeError::TooLarge(grown));
    }
    match includes.get(&node.id) {
        Some(known) if *known != fetched => Err(IncludeError::Differs),
        _ => {
            includes.insert(node.id.clone(), fetched);
            Ok(steps.len())
        }
    }
}

/// The digest an include or includeFlow step pins (`digest:`), if any.
fn pinned_digest(node: &PlanNode) -> Option<&str> {
    match node.step.as_ref().map(|s| &s.kind) {
        Some(StepKind::Include(step)) => step.digest.as_deref(),
        Some(StepKind::IncludeFlow(step)) => step.digest.as_deref(),
        _ => None,
    }
}

/// `namespace/name` an includeFlow node reads; `root` is the running flow's `namespace/name`.
fn target(node: &PlanNode, root: &str) -> String {
    match &node.kind {
        NodeKind::IncludeFlow {
            flow, namespace, ..
        } => {
            let ns = namespace
                .clone()
                .unwrap_or_else(|| root.split('/').next().unwrap_or_default().to_string());
            format!("{ns}/{flow}")
        }
        _ => String::new(),
    }
}

/// The includeFlow starts whose bodies hold `node`, innermost first.
pub fn enclosing_flows<'p>(plan: &'p Plan, node: &PlanNode) -> Vec<&'p PlanNode> {
    enclosing_includes(plan, node)
        .into_iter()
        .filter(|s| matches!(s.kind, NodeKind::IncludeFlow { .. }))
        .collect()
}

/// The include and includeFlow starts whose bodies hold `node`, innermost first.
fn enclosing_includes<'p>(plan: &'p Plan, node: &PlanNode) -> Vec<&'p PlanNode> {
    let mut out = Vec::new();
    let mut parent = node.parent.clone();
    while let Some(end_id) = parent {
        let Some(end) = plan.node(&end_id) else { break };
        if let NodeKind::CompoundEnd { start, .. } = &end.kind {
            if let Some(s) = plan.node(start) {
                if matches!(
                    s.kind,
                    NodeKind::Include { .. } | NodeKind::IncludeFlow { .. }
                ) {
                    out.push(s);
                }
            }
        }
        parent = end.parent.clone();
    }
    out
}

/// What an `include` step reads, as people name it (`configMap NAME key KEY`), as written in
/// the step (a source computed by an expression is told apart by its text).
fn source_of(node: &PlanNode) -> Option<String> {
    let Some(StepKind::Include(step)) = node.step.as_ref().map(|s| &s.kind) else {
        return None;
    };
    Some(match &step.source {
        IncludeSource::Url(url) => format!("URL {url}"),
        IncludeSource::Ref(refs) => match (&refs.config_map_ref, &refs.secret_ref) {
            (Some(r), _) => format!("configMap {} key {}", r.name, r.key),
            (None, Some(r)) => format!("secret {} key {}", r.name, r.key),
            (None, None) => return None,
        },
    })
}

/// How many DAG nodes `steps` (validated) compile to on their own; their includes are counted
/// when those fetch.
fn plan_size(steps: &Value) -> usize {
    let id = FlowId {
        name: "included",
        namespace: None,
    };
    match pseudoflow_compiler::compile(&id, &serde_json::json!({ "steps": steps })) {
        Ok(c) => c.plan.len(),
        // Not compilable alone (validated already, so unlikely): two nodes per step object.
        Err(_) => 2 * count_steps(steps),
    }
}

/// How deep the step at `path` (`spec.steps[0].then[1]`: 2) is nested.
fn step_depth(path: &str) -> usize {
    path.matches('[').count()
}

/// How many levels of steps `steps` holds (a flat list: 1), as compiled alone.
fn nested_depth(steps: &Value) -> usize {
    let id = FlowId {
        name: "included",
        namespace: None,
    };
    match pseudoflow_compiler::compile(&id, &serde_json::json!({ "steps": steps })) {
        Ok(c) => c
            .plan
            .nodes()
            .map(|n| step_depth(&n.path))
            .max()
            .unwrap_or(0),
        // Not compilable alone: counted as nested step objects (those with a string `type`).
        Err(_) => {
            let mut deepest = 0;
            let mut todo = vec![(steps, 0usize)];
            while let Some((v, depth)) = todo.pop() {
                match v {
                    Value::Array(items) => todo.extend(items.iter().map(|i| (i, depth))),
                    Value::Object(map) => {
                        let d = depth + usize::from(map.get("type").is_some_and(Value::is_string));
                        deepest = deepest.max(d);
                        todo.extend(map.values().map(|i| (i, d)));
                    }
                    _ => {}
                }
            }
            deepest
        }
    }
}

/// Objects with a string `type` in `v`: an upper bound of its steps.
fn count_steps(v: &Value) -> usize {
    let mut n = 0;
    let mut todo = vec![v];
    while let Some(v) = todo.pop() {
        match v {
            Value::Array(items) => todo.extend(items),
            Value::Object(map) => {
                n += usize::from(map.get("type").is_some_and(Value::is_string));
                todo.extend(map.values());
            }
            _ => {}
        }
    }
    n
}

/// The flow variables `node` sees before step outputs and loop items: the flow's `spec.vars`, or
/// inside an included flow that flow's vars (plus the caller's view when `inheritVars`).
pub fn base_vars(
    plan: &Plan,
    node: &PlanNode,
    own: &BTreeMap<String, String>,
    includes: &BTreeMap<String, Included>,
) -> BTreeMap<String, String> {
    let Some(inner) = enclosing_flows(plan, node).into_iter().next() else {
        return own.clone();
    };
    let mut vars = includes
        .get(&inner.id)
        .map(|i| i.vars.clone())
        .unwrap_or_default();
    if let NodeKind::IncludeFlow {
        inherit_vars: true, ..
    } = inner.kind
    {
        vars.extend(base_vars(plan, inner, own, includes));
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_included_step_taking_an_image_from_tenant_data_is_refused_when_accepted() {
        let spec: pseudoflow_crd::PseudoFlowSpec = serde_json::from_value(json!({
            "bind": {"apiVersion": "example.com/v1", "kind": "Db"},
            "steps": [
                {"type": "template", "output": "img", "template": "{{ object.spec.img }}"},
                {"type": "include", "source": {"configMapRef": {"name": "c", "key": "k"}}}]}))
        .unwrap();
        let inc = |image: &str| Included {
            steps: json!([{"type": "exec", "cmd": "true", "image": image}]),
            vars: BTreeMap::new(),
            from_secret: false,
        };
        let fixed: BTreeMap<String, Included> = [("s1".to_string(), inc("busybox"))].into();
        assert!(check_tenant_data(&spec, &fixed).is_ok());
        let tainted: BTreeMap<String, Included> = [("s1".to_string(), inc("${img}"))].into();
        let e = check_tenant_data(&spec, &tainted).unwrap_err();
        assert!(
            e.starts_with("s1[0].image: ${img} sets image from \"img\""),
            "{e}"
        );
    }

    fn compile(spec: Value, includes: &BTreeMap<String, Included>) -> Compiled {
        let id = FlowId {
            name: "a",
            namespace: Some("ops"),
        };
        expand(&id, &spec, includes).unwrap()
    }

    fn steps(v: Value) -> Included {
        Included {
            steps: v,
            vars: BTreeMap::new(),
            from_secret: false,
        }
    }

    #[test]
    fn fetched_steps_become_the_body_and_other_ids_stay() {
        let spec = json!({"steps": [
            {"type": "include", "source": {"configMapRef": {"name": "c", "key": "k"}}},
            {"type": "log", "message": "after"},
        ]});
        let before = compile(spec.clone(), &BTreeMap::new());
        let mut includes = BTreeMap::new();
        let node = before.plan.node("s0").unwrap().clone();
        let n = accept(
            &before.plan,
            "ops/a",
            &node,
            steps(json!([{"type": "log", "message": "in"}, {"type": "sleep", "seconds": 1}])),
            &mut includes,
        )
        .unwrap();
        assert_eq!(n, 2);
        let after = compile(spec, &includes);
        let ids: Vec<&str> = after.plan.nodes().map(|n| n.id.as_str()).collect();
        for id in ["s0", "s0-s0", "s0-s1", "s0-end", "s1"] {
            assert!(ids.contains(&id), "{id} missing from {ids:?}");
        }
        assert_eq!(
            after.plan.node("s0-s1").unwrap().path,
            "spec.steps[0].included[1]"
        );
    }

    #[test]
    fn invalid_fetched_steps_are_refused_with_their_path() {
        let spec = json!({"steps": [{"type": "include", "source": {"configMapRef": {"name": "c", "key": "k"}}}]});
        let c = compile(spec, &BTreeMap::new());
        let node = c.plan.node("s0").unwrap().clone();
        let mut includes = BTreeMap::new();
        let err = accept(
            &c.plan,
            "ops/a",
            &node,
            steps(json!([{"type": "slep", "seconds": 1}])),
            &mut includes,
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("spec.steps[0].included[0]"), "{msg}");
        assert!(msg.contains("sleep"), "did you mean: {msg}");
        assert!(includes.is_empty());
    }

    #[test]
    fn a_flow_including_its_includer_is_a_cycle() {
        let spec = json!({"steps": [{"type": "includeFlow", "name": "b"}]});
        let c = compile(spec.clone(), &BTreeMap::new());
        let mut includes = BTreeMap::new();
        let b = c.plan.node("s0").unwrap().clone();
        accept(
            &c.plan,
            "ops/a",
            &b,
            steps(json!([{"type": "includeFlow", "name": "a"}])),
            &mut includes,
        )
        .unwrap();
        let c = compile(spec, &includes);
        let a_again = c.plan.node("s0-s0").unwrap().clone();
        let err = accept(
            &c.plan,
            "ops/a",
            &a_again,
            steps(json!([{"type": "includeFlow", "name": "b"}])),
            &mut includes,
        )
        .unwrap_err();
        assert_eq!(
            err,
            IncludeError::Cycle("ops/a → ops/b → ops/a".into()),
            "{err}"
        );
    }

    fn include(name: &str) -> Value {
        json!({"type": "include", "source": {"configMapRef": {"name": name, "key": "steps"}}})
    }

    /// The include node nested deepest in `c`.
    fn innermost_include(c: &Compiled) -> PlanNode {
        c.plan
            .nodes()
            .filter(|n| n.step_type == "include")
            .max_by_key(|n| n.path.len())
            .unwrap()
            .clone()
    }

    #[test]
    fn a_config_map_including_itself_is_a_cycle_named_by_its_source() {
        let spec = json!({"steps": [include("self")]});
        let c = compile(spec.clone(), &BTreeMap::new());
        let mut includes = BTreeMap::new();
        let twice = json!([{"type": "parallel", "steps": [[include("self")], [include("self")]]}]);
        let outer = c.plan.node("s0").unwrap().clone();
        accept(
            &c.plan,
            "ops/a",
            &outer,
            steps(twice.clone()),
            &mut includes,
        )
        .unwrap();
        let c = compile(spec, &includes);
        let inner = innermost_include(&c);
        assert!(
            inner.path.starts_with("spec.steps[0].included[0]"),
            "{}",
            inner.path
        );
        let err = accept(&c.plan, "ops/a", &inner, steps(twice), &mut includes).unwrap_err();
        assert_eq!(
            err,
            IncludeError::SourceCycle("configMap self key steps → configMap self key steps".into())
        );
        assert!(err.to_string().starts_with("include cycle: "), "{err}");
        assert_eq!(includes.len(), 1, "nothing stored for the cycle");
    }

    #[test]
    fn other_sources_nest_up_to_the_include_depth_limit() {
        let spec = json!({"steps": [include("c0")]});
        let mut includes = BTreeMap::new();
        for depth in 0..MAX_INCLUDE_DEPTH {
            let c = compile(spec.clone(), &includes);
            let node = innermost_include(&c);
            let next = steps(json!([include(&format!("c{}", depth + 1))]));
            accept(&c.plan, "ops/a", &node, next, &mut includes).unwrap();
        }
        let c = compile(spec, &includes);
        let node = innermost_include(&c);
        let err = accept(&c.plan, "ops/a", &node, steps(json!([])), &mut includes).unwrap_err();
        assert_eq!(err, IncludeError::Nested, "{err}");
    }

    #[test]
    fn included_steps_that_would_grow_the_plan_past_the_limit_are_refused() {
        let c = compile(json!({"steps": [include("big")]}), &BTreeMap::new());
        let node = c.plan.node("s0").unwrap().clone();
        let log = json!({"type": "log", "message": "x"});
        let many = Value::Array(vec![log.clone(); MAX_PLAN_NODES]);
        let mut includes = BTreeMap::new();
        let err = accept(&c.plan, "ops/a", &node, steps(many), &mut includes).unwrap_err();
        assert!(
            matches!(err, IncludeError::TooLarge(n) if n > MAX_PLAN_NODES),
            "{err}"
        );
        assert!(includes.is_empty());
        let few = Value::Array(vec![log; 100]);
        assert_eq!(
            accept(&c.plan, "ops/a", &node, steps(few), &mut includes),
            Ok(100)
        );
    }

    #[test]
    fn fetched_steps_nested_deeper_than_a_spec_may_be_are_refused_with_their_path() {
        let c = compile(json!({"steps": [include("deep")]}), &BTreeMap::new());
        let node = c.plan.node("s0").unwrap().clone();
        let mut list = json!([1]);
        for _ in 0..MAX_SPEC_DEPTH {
            list = json!([list]);
        }
        let fetched = steps(json!([{"type": "loop", "forEach": list, "steps": []}]));
        let mut includes = BTreeMap::new();
        let err = accept(&c.plan, "ops/a", &node, fetched, &mut includes).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("spec.steps[0].included[0].forEach[0]"),
            "{msg}"
        );
        assert!(includes.is_empty());
    }

    #[test]
    fn a_pinned_include_accepts_its_steps_and_refuses_others_naming_both_digests() {
        let ran = json!([{"type": "log", "message": "reviewed"}]);
        let pin = steps_digest(&ran);
        assert_eq!(
            pin,
            format!(
                "sha256:{}",
                pseudoflow_compiler::names::content_digest(
                    br#"[{"message":"reviewed","type":"log"}]"#
                )
            ),
            "keys sorted, no spaces"
        );
        let step = json!({"type": "include", "as": "steps", "digest": pin,
            "source": {"configMapRef": {"name": "lib", "key": "steps"}}});
        let c = compile(json!({"steps": [step]}), &BTreeMap::new());
        let node = c.plan.node("s0").unwrap().clone();
        let mut includes = BTreeMap::new();
        let edited = json!([{"type": "log", "message": "edited"}]);
        let err = accept(
            &c.plan,
            "ops/a",
            &node,
            steps(edited.clone()),
            &mut includes,
        );
        let msg = err.unwrap_err().to_string();
        assert!(
            msg.contains(&pin) && msg.contains(&steps_digest(&edited)),
            "{msg}"
        );
        assert!(includes.is_empty(), "nothing stored");
        assert_eq!(
            accept(&c.plan, "ops/a", &node, steps(ran), &mut includes),
            Ok(1)
        );
        assert_eq!(includes["s0"].digest(), pin);
    }

    #[test]
    fn steps_are_counted_without_recursion() {
        assert_eq!(
            count_steps(
                &json!([{"type": "log"}, {"type": "loop", "steps": [{"type": "sleep"}]}, {"type": 3}])
            ),
            3
        );
    }

    #[test]
    fn included_flow_vars_are_scoped_and_inherit_on_request() {
        let own: BTreeMap<String, String> = [("who".to_string(), "caller".to_string())].into();
        for (inherit, want_who) in [(false, None), (true, Some("caller"))] {
            let spec = json!({"vars": {"who": "caller"}, "steps": [{"type": "includeFlow", "name": "b", "inheritVars": inherit}]});
            let mut includes = BTreeMap::new();
            includes.insert(
                "s0".to_string(),
                Included {
                    steps: json!([{"type": "log", "message": "${what}"}]),
                    vars: [("what".to_string(), "b's".to_string())].into(),
                    from_secret: false,
                },
            );
            let c = compile(spec, &includes);
            let inner = c.plan.node("s0-s0").unwrap();
            let vars = base_vars(&c.plan, inner, &own, &includes);
            assert_eq!(vars.get("what").map(String::as_str), Some("b's"));
            assert_eq!(vars.get("who").map(String::as_str), want_who);
            let outer = c.plan.node("s0").unwrap();
            assert_eq!(base_vars(&c.plan, outer, &own, &includes), own);
        }
    }
}
