//! `Task::Run`: one module per kind of work. API steps act with the pod's ServiceAccount; node
//! steps (the input names a `targetNode`) act on the node's files under the host root or run
//! host commands through `nsenter`.

pub mod apply;
pub mod artifacts;
pub mod copy;
pub mod copy_mark;
pub mod cordon;
pub mod delete;
pub mod drain;
pub mod drain_pods;
pub mod exec;
pub mod exec_node;
pub mod labels;
pub mod node_file;
pub mod patch_file;
pub mod wait_for;

use std::future::Future;
use std::pin::Pin;

use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::{Step, StepKind};
use serde_json::Value;

use crate::context::ExecCtx;
use crate::error::StepError;
use exec_node::HostCommand;

/// One step's work, not started yet: nothing happens until it is awaited.
pub type Work<'a> = Pin<Box<dyn Future<Output = Result<StepResult, StepError>> + Send + 'a>>;

/// Performs the step.
pub async fn run(ctx: &ExecCtx, step: &Step) -> Result<StepResult, StepError> {
    match work(ctx, step) {
        Some(w) => w.await,
        None => Err(StepError::input(format!(
            "step type {} is not run by the executor",
            step.kind.type_name()
        ))),
    }
}

/// The executor's one registration point: the work of each step type it runs (`Task::Run`), or
/// `None` for a type it does not (done by the controller, or only shaping the DAG; a compound's
/// condition, node list or fetch is a task of its own, in `tasks/`). A new type runs here once
/// it has an arm; `tests/registry.rs` fails for a type the compiler lowers to a Job without one.
pub fn work<'a>(ctx: &'a ExecCtx, step: &'a Step) -> Option<Work<'a>> {
    let on_node = ctx.input.target_node.is_some();
    let root = ctx.host_root.as_path();
    let node_only = move || need_node(ctx, step);
    Some(match &step.kind {
        StepKind::Apply(s) => Box::pin(apply::run(ctx, s)),
        StepKind::Delete(s) => Box::pin(delete::run(ctx, s)),
        StepKind::ApplyFile(s) => Box::pin(artifacts::apply_file(ctx, &s.path)),
        StepKind::DeleteFile(s) if on_node => {
            Box::pin(async move { node_file::delete(root, &s.path) })
        }
        StepKind::DeleteFile(s) => Box::pin(artifacts::delete_file(ctx, &s.path)),
        StepKind::WaitFor(s) => Box::pin(wait_for::run(ctx, s)),
        StepKind::SetLabel(s) => Box::pin(labels::set(ctx, &s.target, &s.labels)),
        StepKind::RemoveLabel(s) => Box::pin(labels::remove(ctx, &s.target, &s.keys)),
        StepKind::PatchLabel(s) => Box::pin(labels::patch(
            ctx,
            &s.target,
            ctx.input.step.get("fromVarValue"),
        )),
        StepKind::Copy(s) => Box::pin(copy::run(ctx, s)),
        StepKind::Exec(s) => Box::pin(exec::run(ctx, s)),
        StepKind::Cordon(s) => Box::pin(cordon::run_cordon(ctx, &s.node)),
        StepKind::Uncordon(s) => Box::pin(cordon::run_uncordon(ctx, &s.node)),
        StepKind::Drain(s) => Box::pin(drain::run(ctx, s, crate::timeout_of(&ctx.input, step))),
        StepKind::Script(s) if on_node => Box::pin(exec_node::run(ctx, HostCommand::of_script(s))),
        StepKind::Script(s) => Box::pin(exec::script(&s.code, s.var.as_deref(), s.log_output)),
        StepKind::ExecNode(s) => Box::pin(async move {
            node_only()?;
            exec_node::run(ctx, HostCommand::of_exec_node(s)).await
        }),
        StepKind::ConfigFile(s) => Box::pin(async move {
            node_only()?;
            let (mode, owner) = (s.mode.as_deref(), s.owner.as_deref());
            node_file::write(root, &s.path, &s.content, mode, owner)
        }),
        StepKind::PatchFile(s) => Box::pin(async move {
            node_only()?;
            patch_file::run(root, s, &ctx.input.run_id)
        }),
        StepKind::Template(s) if s.writes_file() => Box::pin(async move {
            node_only()?;
            node_file::write(root, &s.output, &s.template, s.mode.as_deref(), None)
        }),
        StepKind::Template(s) => Box::pin(async move {
            let mut r = StepResult::succeeded(false, format!("rendered into {}", s.output));
            r.vars
                .insert(s.output.clone(), Value::String(s.template.clone()));
            Ok(r)
        }),
        // Not the executor's: the controller does these itself (`walk/src/local.rs`, its
        // timers and approvals), an include's fetch is a task of its own (`tasks/include.rs`),
        // and structural steps only shape the DAG. Listed, not `_`, so a new step type does
        // not compile until someone decides where it runs.
        StepKind::Log(_)
        | StepKind::Sleep(_)
        | StepKind::Eval(_)
        | StepKind::Approval(_)
        | StepKind::Include(_)
        | StepKind::IncludeFlow(_)
        | StepKind::If(_)
        | StepKind::When(_)
        | StepKind::Loop(_)
        | StepKind::LoopNodes(_)
        | StepKind::Parallel(_)
        | StepKind::Retry(_)
        | StepKind::OnError(_) => return None,
    })
}

/// Refuses a node step whose input names no node to act on.
fn need_node(ctx: &ExecCtx, step: &Step) -> Result<(), StepError> {
    if ctx.input.target_node.is_some() {
        Ok(())
    } else {
        Err(StepError::input(format!(
            "{} is a node step but the input has no targetNode",
            step.kind.type_name()
        )))
    }
}
