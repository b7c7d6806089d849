//! Whether a bound flow may record each object's run only in the object (`spec.bind.record:
//! Object`, docs/decisions.md#bound-flows-recorded-in-the-object): a placement the compiler
//! decides, statically, so no object's content can make the flow run a pod or another step type.
//!
//! Such a flow keeps no child flow and no run state per object: the controller runs the
//! object's steps in its memory, in a task of its own per object, and a controller killed
//! midway runs them again. So every step (its `onDelete` steps too, run behind a finalizer on
//! the object when it is deleted) must be one the controller runs itself and that is safe to
//! repeat ([`crate::placement`]), or API work that is not safe to repeat but that the
//! controller runs once under a sealed progress record on the object (an `exec` in another
//! pod, [`ONCE_REASON`]: a restarted controller resumes after it and never runs it again), and
//! nothing may wait for a person (no `approval`: its decision is kept in a run's state), touch
//! a node or fetch steps at run time. Waits (`waitFor`,
//! `sleep`, a retry's backoff) hold only the object's task. An `if`/`when` condition (one read
//! of one object) is evaluated by the controller.

use pseudoflow_crd::bind::BindRecord;
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{ApiSteps, Diagnostics, PseudoFlowSpec, StepKind};

use crate::plan::{LoopOver, NodeKind, Plan, PlanNode};

/// Where a bound flow records each object's run, with the reason `pseudoflow-compile` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordIn {
    /// Not a bound flow.
    Unbound,
    /// A child flow per object (`bind.record: Child`, or unset and a step needs it).
    Child,
    /// Only the object (`bind.record: Object`, or unset and every step allows it): every
    /// step runs in the controller.
    Object,
}

impl RecordIn {
    /// Where a compiled flow records (its `bind.record` is set by [`resolve`]; an unset one,
    /// read before compiling, counts as `Child`).
    pub fn of(spec: &PseudoFlowSpec) -> Self {
        match spec.bind.as_ref().map(|b| b.record) {
            None => RecordIn::Unbound,
            Some(Some(BindRecord::Object)) => RecordIn::Object,
            Some(_) => RecordIn::Child,
        }
    }

    /// What `pseudoflow-compile` shows for it in the flow's title (None: nothing beyond
    /// today's title, for a plain flow and a child-recorded one).
    pub fn describe(&self) -> Option<&'static str> {
        match self {
            RecordIn::Unbound | RecordIn::Child => None,
            RecordIn::Object => Some(
                "record=object (every step runs in the controller: the result is recorded \
                 only in the object)",
            ),
        }
    }
}

const NEEDS: &str = "bind.record: Object needs every step to run in the controller";

/// Decides where a bound flow records each object's run. `record: Object` is refused for a
/// flow whose plan (or onDelete plan) is not eligible, with an error naming each step that is
/// not and why; `record: Child` is kept; unset, it becomes `Object` when the flow is eligible
/// and `Child` otherwise (so a flow as a new user writes it takes the fast path when it can),
/// and a `bind.retry` (which only a flow recorded in its objects has) on a flow that cannot be
/// is refused naming why.
pub(crate) fn resolve(
    spec: &mut PseudoFlowSpec,
    plan: &mut Plan,
    on_delete: Option<&mut Plan>,
    diags: &mut Diagnostics,
) {
    let Some(asked) = spec.bind.as_ref().map(|b| b.record) else {
        return;
    };
    let why_not = reasons(spec, plan, on_delete.as_deref());
    let chosen = match asked {
        Some(BindRecord::Object) => {
            for r in why_not {
                let message = match r.step_type {
                    Some(t) => format!("({t}): {NEEDS}; {}", r.why),
                    None => format!("{NEEDS}; {}", r.why),
                };
                diags.error(r.path, message);
            }
            BindRecord::Object
        }
        Some(BindRecord::Child) => BindRecord::Child,
        None => match why_not.first() {
            None => BindRecord::Object,
            Some(r) => {
                if spec.bind.as_ref().is_some_and(|b| b.retry.is_some()) {
                    let step = r.step_type.as_deref().map(|t| format!(" ({t})"));
                    diags.error(
                        "spec.bind.retry",
                        format!(
                            "only a flow recorded in its objects retries a failed object, and \
                             this one cannot be: {}{}: {}",
                            r.path,
                            step.unwrap_or_default(),
                            r.why
                        ),
                    );
                }
                BindRecord::Child
            }
        },
    };
    if let Some(b) = spec.bind.as_mut() {
        b.record = Some(chosen);
    }
    if chosen == BindRecord::Object {
        placed_in_controller(plan);
        if let Some(p) = on_delete {
            placed_in_controller(p);
        }
    }
}

/// Why a step not safe to repeat runs in the controller under `record: Object`, as
/// `pseudoflow-compile` shows it.
pub const ONCE_REASON: &str = "bound flow recorded in its objects: run once, its start and end \
     kept in the object's sealed progress record";

/// Whether `n` is API work not safe to repeat that the controller runs under a progress record
/// (`exec` in another pod: [`pseudoflow_crd::steps::StepParams::runs_in_controller_once`]).
fn runs_once(n: &PlanNode) -> bool {
    n.kind == NodeKind::Action
        && n.placement == Placement::Api
        && n.step.as_ref().is_some_and(|s| !s.isolate)
        && n.step_kind()
            .is_some_and(|k| k.params().runs_in_controller_once())
}

/// A plan recorded in its objects: each step not safe to repeat is placed in the controller
/// ([`ONCE_REASON`]), and no step is fused into a Job's segment (none runs in a Job).
fn placed_in_controller(plan: &mut Plan) {
    let mut graph = plan.graph.clone();
    for n in graph.node_weights_mut() {
        n.segment = None;
        if runs_once(n) {
            n.in_controller = Some(ONCE_REASON.to_string());
        }
    }
    *plan = Plan::new(graph, plan.start, plan.end);
}

/// Places an object's run of a flow recorded in its objects as [`resolve`] placed the bound
/// flow's own plans: the run is compiled from the child flow the object would have had, which
/// has no `bind` to resolve (the bound flow's compile already refused any step not eligible).
pub fn place_for_object(c: &mut crate::Compiled) {
    placed_in_controller(&mut c.plan);
    if let Some(p) = c.on_delete.as_mut() {
        placed_in_controller(p);
    }
}

/// One reason a flow cannot be recorded in its objects.
struct Reason {
    /// Where in the flow.
    path: String,
    /// The step's type, when a step is the reason.
    step_type: Option<String>,
    /// Why.
    why: &'static str,
}

/// Each reason the flow cannot be recorded in its objects.
fn reasons(spec: &PseudoFlowSpec, plan: &Plan, on_delete: Option<&Plan>) -> Vec<Reason> {
    let reason = |path: &str, why| Reason {
        path: path.into(),
        step_type: None,
        why,
    };
    if spec.options.api_steps == ApiSteps::Job {
        let why = "apiSteps: Job runs its API steps in pods";
        return vec![reason("spec.options.apiSteps", why)];
    }
    let mut out = Vec::new();
    // onDelete steps run the same way, behind the flow's finalizer on the object, when it is
    // deleted: the same rules hold, each error naming its `spec.onDelete[i]` path.
    for n in std::iter::once(plan).chain(on_delete).flat_map(Plan::nodes) {
        if let Some(why) = ineligible(n) {
            out.push(Reason {
                path: n.path.clone(),
                step_type: Some(n.step_type.to_string()),
                why,
            });
        }
    }
    out
}

/// Why node `n` cannot run in the controller's memory, if it cannot.
fn ineligible(n: &PlanNode) -> Option<&'static str> {
    match &n.kind {
        NodeKind::Action => action_ineligible(n),
        // One GET of one object and a jsonPath test: the controller reads it as the flow's
        // ServiceAccount (controller/src/drive/condition.rs), no pod needed.
        NodeKind::Condition => None,
        NodeKind::LoopStart {
            over: LoopOver::Nodes { .. },
            ..
        } => Some("it runs on nodes"),
        NodeKind::Include { .. } | NodeKind::IncludeFlow { .. } => {
            Some("its steps are fetched at run time")
        }
        _ => None,
    }
}

fn action_ineligible(n: &PlanNode) -> Option<&'static str> {
    if n.in_controller.is_some() || runs_once(n) {
        return None;
    }
    let params = n.step_kind().map(|k| k.params());
    let awaits = params.as_ref().is_some_and(|p| p.awaits_decision());
    match n.placement {
        Placement::Controller if awaits => Some("it waits for a person's decision"),
        Placement::Controller => None,
        Placement::Node => Some("this one runs on a node"),
        _ if n
            .step_kind()
            .is_some_and(|k| matches!(k, StepKind::Exec(e) if e.log_output)) =>
        {
            Some("this one writes its output to its pod's log (logOutput: true)")
        }
        _ if n.step.as_ref().is_some_and(|s| s.isolate) => {
            Some("this one asks for a pod of its own (isolate: true)")
        }
        _ => Some("this one runs in a pod"),
    }
}

#[cfg(test)]
mod tests {
    use super::RecordIn;
    use crate::compile::{compile, FlowId};
    use serde_json::{json, Value};

    fn errors(steps: Value, options: Value) -> Vec<String> {
        let spec = json!({"options": options, "steps": steps,
            "bind": {"apiVersion": "example.com/v1", "kind": "Gadget", "record": "Object"}});
        match compile(&FlowId::default(), &spec) {
            Ok(_) => vec![],
            Err(d) => d.errors().map(|d| d.to_string()).collect(),
        }
    }

    fn cm(name: &str) -> Value {
        json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}}})
    }

    #[test]
    fn api_and_pure_steps_are_eligible() {
        let steps = json!([cm("a"), {"type": "log", "message": "x"},
            {"type": "loop", "forEach": ["a", "b"], "steps": [cm("${item}")]}]);
        assert_eq!(errors(steps, json!({})), Vec::<String>::new());
    }

    #[test]
    fn a_step_in_a_pod_is_refused_naming_its_path() {
        let steps = json!([cm("a"), {"type": "exec", "cmd": "true"},
            {"type": "apply", "isolate": true, "manifests": {"apiVersion": "v1",
                "kind": "ConfigMap", "metadata": {"name": "b"}}}]);
        assert_eq!(
            errors(steps, json!({})),
            [
                "error: spec.steps[1]: (exec): bind.record: Object needs every step to run in \
                 the controller; this one runs in a pod",
                "error: spec.steps[2]: (apply): bind.record: Object needs every step to run in \
                 the controller; this one asks for a pod of its own (isolate: true)"
            ]
        );
    }

    #[test]
    fn api_steps_in_jobs_and_waiting_steps_are_refused() {
        let e = errors(json!([cm("a")]), json!({"apiSteps": "Job"}));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("error: spec.options.apiSteps: bind.record"),
            "{e:?}"
        );
        let e = errors(
            json!([{"type": "approval", "name": "go", "message": "ok?"}, {"type": "sleep", "seconds": 5}]),
            json!({}),
        );
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("spec.steps[0]: (approval)") && e[0].contains("decision"));
    }

    /// Waits hold only the object's own task (the controller's `bind/in_object/tasks.rs`): a
    /// `waitFor` however long, a `sleep` and a `retry` are eligible.
    #[test]
    fn waits_of_any_length_are_eligible() {
        let wait = json!({"type": "waitFor", "resource": {"kind": "Secret", "name": "s"},
            "condition": "Exist", "timeoutSeconds": 3600});
        let steps = json!([wait, {"type": "sleep", "seconds": 600},
            {"type": "retry", "attempts": 5, "backoffSeconds": 60, "steps": [cm("a")]}]);
        assert_eq!(errors(steps, json!({})), Vec::<String>::new());
    }

    #[test]
    fn if_and_when_conditions_are_read_by_the_controller() {
        let cond = json!({"resource": {"kind": "ConfigMap", "name": "x"},
            "jsonPath": ".data.on", "op": "equals", "value": "yes"});
        let steps = json!([{"type": "when", "condition": cond}, cm("a"),
            {"type": "if", "condition": cond, "then": [cm("b")], "else": [cm("c")]}]);
        assert_eq!(errors(steps, json!({})), Vec::<String>::new());
    }

    /// `onDelete` runs in the controller too (behind the flow's finalizer on the object): its
    /// steps are held to the same rules, each error naming its `spec.onDelete[i]` path.
    #[test]
    fn on_delete_steps_are_held_to_the_same_rules_naming_their_path() {
        let spec = |on_delete: Value| {
            json!({"steps": [cm("a")], "onDelete": on_delete,
                "bind": {"apiVersion": "example.com/v1", "kind": "Gadget", "record": "Object"}})
        };
        let ok = spec(json!([cm("bye"), {"type": "log", "message": "x"}]));
        assert!(compile(&FlowId::default(), &ok).is_ok());
        let bad = spec(json!([cm("bye"), {"type": "exec", "cmd": "true"},
            {"type": "approval", "name": "go", "message": "ok?"}]));
        let e: Vec<String> = match compile(&FlowId::default(), &bad) {
            Ok(_) => vec![],
            Err(d) => d.errors().map(|d| d.to_string()).collect(),
        };
        assert_eq!(
            e,
            [
                "error: spec.onDelete[1]: (exec): bind.record: Object needs every step to run \
                 in the controller; this one runs in a pod",
                "error: spec.onDelete[2]: (approval): bind.record: Object needs every step to \
                 run in the controller; it waits for a person's decision"
            ]
        );
    }

    /// An `exec` in another pod (pods/exec) runs in the controller, once, under the object's
    /// progress record; its own shell, or its output in a pod's log, still needs a pod.
    #[test]
    fn an_exec_in_another_pod_runs_once_in_the_controller_unfused() {
        let pod_exec = json!({"type": "exec", "pod": "db-0", "cmd": "mysqldump > /b"});
        let steps = json!([pod_exec, {"type": "log", "message": "x"}, cm("a")]);
        let spec = json!({"steps": steps, "onDelete": [pod_exec],
            "bind": {"apiVersion": "example.com/v1", "kind": "Gadget"}});
        let c = compile(&FlowId::default(), &spec).expect("compiles");
        assert_eq!(RecordIn::of(&c.spec), RecordIn::Object);
        let placed = |p: &crate::plan::Plan| -> Vec<(String, Option<String>)> {
            p.nodes()
                .filter(|n| n.step_type == "exec")
                .map(|n| (n.path.clone(), n.in_controller.clone()))
                .collect()
        };
        let once = Some(super::ONCE_REASON.to_string());
        assert_eq!(
            placed(&c.plan),
            [("spec.steps[0]".to_string(), once.clone())]
        );
        let on_delete = c.on_delete.as_ref().expect("an onDelete plan");
        assert_eq!(placed(on_delete), [("spec.onDelete[0]".to_string(), once)]);
        assert!(
            c.plan.segments().is_empty(),
            "nothing is fused: no Job runs"
        );
        assert!(c.plan.nodes().all(|n| n.segment.is_none()));

        let logged = json!([{"type": "exec", "pod": "db-0", "cmd": "true", "logOutput": true}]);
        assert_eq!(
            errors(logged, json!({})),
            [
                "error: spec.steps[0]: (exec): bind.record: Object needs every step to run in the \
              controller; this one writes its output to its pod's log (logOutput: true)"
            ]
        );
        let own_shell = json!({"steps": [{"type": "exec", "cmd": "true"}],
            "bind": {"apiVersion": "example.com/v1", "kind": "Gadget"}});
        assert_eq!(chosen(&own_shell), RecordIn::Child);
    }

    fn chosen(spec: &Value) -> RecordIn {
        RecordIn::of(&compile(&FlowId::default(), spec).expect("compiles").spec)
    }

    /// Unset, `record` is the fast path whenever the flow allows it, as a new user writes it.
    #[test]
    fn unset_the_record_is_the_object_when_every_step_allows_it_else_a_child() {
        let bind = json!({"apiVersion": "example.com/v1", "kind": "Gadget"});
        let fast = json!({"steps": [cm("a")], "bind": bind});
        assert_eq!(chosen(&fast), RecordIn::Object);
        let pod = json!({"steps": [cm("a"), {"type": "exec", "cmd": "true"}], "bind": bind});
        assert_eq!(
            chosen(&pod),
            RecordIn::Child,
            "a step in a pod refuses nothing"
        );
        let on_delete = json!({"steps": [cm("a")], "bind": bind,
            "onDelete": [{"type": "approval", "name": "go", "message": "ok?"}]});
        assert_eq!(chosen(&on_delete), RecordIn::Child);
        let jobs = json!({"steps": [cm("a")], "bind": bind, "options": {"apiSteps": "Job"}});
        assert_eq!(chosen(&jobs), RecordIn::Child);
        // Related objects are followed in the object too (issue #41: seed 002 takes the fast
        // path), asked or not.
        let mut related = fast.clone();
        related["bind"]["related"] = json!([{"apiVersion": "v1", "kind": "Secret", "name": "s"}]);
        assert_eq!(chosen(&related), RecordIn::Object);
        related["bind"]["record"] = json!("Object");
        assert_eq!(chosen(&related), RecordIn::Object);
        let mut asked = fast.clone();
        asked["bind"]["record"] = json!("Child");
        assert_eq!(chosen(&asked), RecordIn::Child, "what is asked is kept");
    }

    #[test]
    fn a_retry_on_a_flow_that_cannot_be_recorded_in_its_objects_says_why() {
        let spec = json!({"steps": [cm("a"), {"type": "exec", "cmd": "true"}],
            "bind": {"apiVersion": "example.com/v1", "kind": "Gadget", "retry": {}}});
        let e: Vec<String> = match compile(&FlowId::default(), &spec) {
            Ok(_) => vec![],
            Err(d) => d.errors().map(|d| d.to_string()).collect(),
        };
        assert_eq!(
            e,
            [
                "error: spec.bind.retry: only a flow recorded in its objects retries a failed \
              object, and this one cannot be: spec.steps[1] (exec): this one runs in a pod"
            ]
        );
        let mut fast = spec.clone();
        fast["steps"] = json!([cm("a")]);
        assert_eq!(chosen(&fast), RecordIn::Object);
    }
}
