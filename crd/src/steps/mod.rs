//! One module per step type. Each owns its parameters (serde + schemars), where its work runs
//! ([`Placement`]) and the checks a schema cannot express. The `step_registry!` list below is
//! the single list that ties a `type:` name to its module (and generates [`registry`]). Adding a
//! leaf step type is its new file here plus one line in that list; the executor or the
//! controller then runs it (docs/architecture.md, "Adding a step type": four files in all).

use crate::check::Ctx;
use crate::step::Step;

#[macro_use]
mod registry_macro;
mod plan_as;

pub use plan_as::{Nesting, PlanAs, Preview};

// The one list of step types: one line per type, which declares its module (see
// `registry_macro.rs`). Its order is `STEP_TYPES`' order, which the CRD's enum and
// docs/steps.md follow.
step_registry! {
    Log => log::LogStep = "log",
    Sleep => sleep::SleepStep = "sleep",
    Apply => apply::ApplyStep = "apply",
    Delete => delete::DeleteStep = "delete",
    ApplyFile => apply_file::ApplyFileStep = "applyFile",
    DeleteFile => delete_file::DeleteFileStep = "deleteFile",
    Include => include::IncludeStep = "include",
    If => r#if::IfStep = "if",
    When => when::WhenStep = "when",
    Exec => exec::ExecStep = "exec",
    ExecNode => exec_node::ExecNodeStep = "execNode",
    ConfigFile => config_file::ConfigFileStep = "configFile",
    PatchFile => patch_file::PatchFileStep = "patchFile",
    Template => template::TemplateStep = "template",
    Script => script::ScriptStep = "script",
    SetLabel => set_label::SetLabelStep = "setLabel",
    RemoveLabel => remove_label::RemoveLabelStep = "removeLabel",
    PatchLabel => patch_label::PatchLabelStep = "patchLabel",
    Loop => r#loop::LoopStep = "loop",
    LoopNodes => loop_nodes::LoopNodesStep = "loopNodes",
    Parallel => parallel::ParallelStep = "parallel",
    WaitFor => wait_for::WaitForStep = "waitFor",
    Retry => retry::RetryStep = "retry",
    OnError => on_error::OnErrorStep = "onError",
    IncludeFlow => include_flow::IncludeFlowStep = "includeFlow",
    Eval => eval::EvalStep = "eval",
    Copy => copy::CopyStep = "copy",
    Cordon => cordon::CordonStep = "cordon",
    Drain => drain::DrainStep = "drain",
    Uncordon => uncordon::UncordonStep = "uncordon",
    Approval => approval::ApprovalStep = "approval",
}

/// Where a step's work happens — decides whether the compiler lowers it to a Job at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Placement {
    /// Pure or bookkeeping work done by the controller itself (log, sleep, eval): no pod.
    Controller,
    /// Kubernetes API work in an executor Job under the flow's ServiceAccount.
    Api,
    /// Work on a node's files or services, in a privileged Job pinned to that node.
    Node,
    /// Control flow (if, loop, parallel, retry, ...): shapes the DAG, runs nothing itself.
    Structure,
}

/// What every step type's parameters provide to the validator and the compiler.
pub trait StepParams {
    /// Where the work runs; `in_node_context` is true inside `loopNodes`.
    fn placement(&self, in_node_context: bool) -> Placement;

    /// What `kubectl pf plan` does with a step of this type (previews it, lists it per node,
    /// walks its nested steps, ...). Required, so a new type decides it where it is defined.
    fn plan_as() -> PlanAs
    where
        Self: Sized;

    /// Semantic checks beyond the schema, reported through `ctx` (paths relative to the step).
    fn validate(&self, _ctx: &mut Ctx) {}

    /// Nested step lists, with the field path of each (`then`, `steps[1]`).
    fn children(&self) -> Vec<(String, &[Step])> {
        Vec::new()
    }

    /// For node steps outside `loopNodes`: the node selector and how many nodes must succeed.
    fn node_targeting(&self) -> Option<(&crate::selector::LabelSelector, crate::common::RunOn)> {
        None
    }

    /// Variables the step sets for later steps: expressions may use them, and an unquoted one
    /// in a shell field is warned about (it is command output, not reviewed text).
    fn outputs(&self) -> Vec<&str> {
        Vec::new()
    }

    /// Fields holding an expression or template of their own, checked and evaluated by the
    /// step itself: `${...}` is not substituted in them first, so a variable's value is never
    /// evaluated as code.
    fn unsubstituted_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Fields a shell parses, where splicing step output unquoted deserves a warning.
    fn shell_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// The timeout the step gets when it sets none; defined once here, used by lowering (the
    /// Job's deadline) and by the executor (which enforces it).
    fn default_timeout_seconds(&self) -> Option<u32> {
        None
    }

    /// For a step that only waits: how long. Nothing runs it; the controller keeps a timer (or,
    /// fused into a segment, its Job's pod waits) — no type name needs checking for this.
    fn waits_seconds(&self) -> Option<u32> {
        None
    }

    /// Whether the controller may run this step itself, as the flow's ServiceAccount, instead
    /// of an executor Job: only Kubernetes API work that is safe to repeat (a controller killed
    /// mid-step runs it again), reads no file, runs no command and touches no node.
    fn runs_in_controller(&self) -> bool {
        false
    }

    /// Whether the controller may run this step itself only where it keeps a record that the
    /// step began and ended (a bound object's sealed progress record, `bind.record: Object`),
    /// because it is Kubernetes API work that is *not* safe to repeat: a command in another,
    /// existing pod through pods/exec. A controller killed while it runs never runs it again.
    fn runs_in_controller_once(&self) -> bool {
        false
    }

    /// Whether the step waits for a person's decision (`approval`): the controller keeps it
    /// running, with `timeoutSeconds` as its deadline, until the decision arrives.
    fn awaits_decision(&self) -> bool {
        false
    }

    /// Whether `timeoutSeconds` bounds the step's whole body (a structural step: its nested
    /// steps are stopped and the step fails once it passes) rather than one Job's work.
    fn times_its_body(&self) -> bool {
        false
    }

    /// Whether the step asked to run only when earlier steps changed its node
    /// (`onlyIfChanged`); the controller skips it otherwise.
    fn only_if_changed(&self) -> bool {
        false
    }

    /// A variable whose value the executor needs with the step (sent as `fromVarValue`):
    /// the executor has no access to the run's variables otherwise.
    fn input_var(&self) -> Option<&str> {
        None
    }

    /// Whether the step reads a YAML body at run time (an artifact file, an included
    /// document): the executor substitutes `${...}` inside that body's parsed string values, so
    /// the controller sends the run's variables with the step (as `bodyVars`).
    fn reads_body(&self) -> bool {
        false
    }
}

/// Checks a node-file path: absolute, no `..`, not the root itself.
pub(crate) fn check_node_path(ctx: &mut Ctx, field: &str, path: &str) {
    if path.contains("${") {
        return;
    }
    if !path.starts_with('/') {
        ctx.error(
            field,
            format!("{path:?} must be an absolute path on the node"),
        );
    } else if path.split('/').any(|c| c == "..") {
        ctx.error(field, format!("{path:?} must not contain '..'"));
    } else if path.trim_end_matches('/').is_empty() {
        ctx.error(field, "must name a file, not /");
    }
}

/// Node steps outside `loopNodes` must say which nodes they touch; inside, they must not.
pub(crate) fn check_node_selector(
    ctx: &mut Ctx,
    selector: Option<&crate::selector::LabelSelector>,
    required: bool,
) {
    match selector {
        Some(s) if ctx.in_node_context => {
            let _ = s;
            ctx.error(
                "nodeSelector",
                "inside loopNodes a node step runs on the loop's node; remove nodeSelector",
            )
        }
        Some(s) => ctx.label_selector("nodeSelector", s),
        None if required && !ctx.in_node_context => ctx.error(
            "nodeSelector",
            "this step changes files on nodes: put it inside loopNodes or give nodeSelector (\"\" = every node)",
        ),
        None => {}
    }
}
