//! `Task::Run`: one module per kind of work. API steps act with the pod's ServiceAccount; node
//! steps (the input names a `targetNode`) act on the node's files under the host root or run
//! host commands through `nsenter`.

pub mod apply;
pub mod artifacts;
pub mod copy;
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

use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::{Step, StepKind};
use serde_json::Value;

use crate::context::ExecCtx;
use crate::error::StepError;
use exec_node::HostCommand;

/// Performs the step.
pub async fn run(ctx: &ExecCtx, step: &Step) -> Result<StepResult, StepError> {
    let on_node = ctx.input.target_node.is_some();
    let root = ctx.host_root.as_path();
    let need_node = || {
        if on_node {
            Ok(())
        } else {
            Err(StepError::input(format!(
                "{} is a node step but the input has no targetNode",
                step.kind.type_name()
            )))
        }
    };
    match &step.kind {
        StepKind::Apply(s) => apply::run(ctx, s).await,
        StepKind::Delete(s) => delete::run(ctx, s).await,
        StepKind::ApplyFile(s) => artifacts::apply_file(ctx, &s.path).await,
        StepKind::DeleteFile(s) if on_node => node_file::delete(root, &s.path),
        StepKind::DeleteFile(s) => artifacts::delete_file(ctx, &s.path).await,
        StepKind::WaitFor(s) => wait_for::run(ctx, s).await,
        StepKind::SetLabel(s) => labels::set(ctx, &s.target, &s.labels).await,
        StepKind::RemoveLabel(s) => labels::remove(ctx, &s.target, &s.keys).await,
        StepKind::PatchLabel(s) => {
            labels::patch(ctx, &s.target, ctx.input.step.get("fromVarValue")).await
        }
        StepKind::Copy(s) => copy::run(ctx, s).await,
        StepKind::Exec(s) => exec::run(ctx, s).await,
        StepKind::Cordon(s) => cordon::run_cordon(ctx, &s.node).await,
        StepKind::Uncordon(s) => cordon::run_uncordon(ctx, &s.node).await,
        StepKind::Drain(s) => drain::run(ctx, s, crate::timeout_of(&ctx.input, step)).await,
        StepKind::Script(s) if on_node => exec_node::run(ctx, HostCommand::of_script(s)).await,
        StepKind::Script(s) => exec::script(&s.code, s.var.as_deref(), s.log_output).await,
        StepKind::ExecNode(s) => {
            need_node()?;
            exec_node::run(ctx, HostCommand::of_exec_node(s)).await
        }
        StepKind::ConfigFile(s) => {
            need_node()?;
            let (mode, owner) = (s.mode.as_deref(), s.owner.as_deref());
            node_file::write(root, &s.path, &s.content, mode, owner)
        }
        StepKind::PatchFile(s) => {
            need_node()?;
            patch_file::run(root, s, &ctx.input.run_id)
        }
        StepKind::Template(s) if s.writes_file() => {
            need_node()?;
            node_file::write(root, &s.output, &s.template, s.mode.as_deref(), None)
        }
        StepKind::Template(s) => {
            let mut r = StepResult::succeeded(false, format!("rendered into {}", s.output));
            r.vars
                .insert(s.output.clone(), Value::String(s.template.clone()));
            Ok(r)
        }
        // Listed, not `_`: a new step type does not compile until it is decided here.
        StepKind::Log(_)
        | StepKind::Sleep(_)
        | StepKind::Approval(_)
        | StepKind::Eval(_)
        | StepKind::Include(_)
        | StepKind::IncludeFlow(_)
        | StepKind::If(_)
        | StepKind::When(_)
        | StepKind::Loop(_)
        | StepKind::LoopNodes(_)
        | StepKind::Parallel(_)
        | StepKind::Retry(_)
        | StepKind::OnError(_) => Err(StepError::input(format!(
            "step type {} is not run by the executor",
            step.kind.type_name()
        ))),
    }
}

/// Whether the executor does some of this step type's work (its `Run`, or the condition, node
/// list or fetch a compound needs). Exhaustive, so adding a step type forces the decision; a
/// test checks that every node the compiler lowers to a Job has a type this accepts.
pub fn has_executor(kind: &StepKind) -> bool {
    match kind {
        StepKind::Apply(_)
        | StepKind::Delete(_)
        | StepKind::ApplyFile(_)
        | StepKind::DeleteFile(_)
        | StepKind::WaitFor(_)
        | StepKind::SetLabel(_)
        | StepKind::RemoveLabel(_)
        | StepKind::PatchLabel(_)
        | StepKind::Copy(_)
        | StepKind::Exec(_)
        | StepKind::Script(_)
        | StepKind::ExecNode(_)
        | StepKind::ConfigFile(_)
        | StepKind::PatchFile(_)
        | StepKind::Template(_)
        | StepKind::Cordon(_)
        | StepKind::Drain(_)
        | StepKind::Uncordon(_) => true,
        // Tasks other than Run (tasks/): a condition, a node list, a fetched include.
        StepKind::If(_)
        | StepKind::When(_)
        | StepKind::LoopNodes(_)
        | StepKind::Include(_)
        | StepKind::IncludeFlow(_) => true,
        // The controller does these itself, or they only shape the DAG.
        StepKind::Log(_)
        | StepKind::Sleep(_)
        | StepKind::Approval(_)
        | StepKind::Eval(_)
        | StepKind::Loop(_)
        | StepKind::Parallel(_)
        | StepKind::Retry(_)
        | StepKind::OnError(_) => false,
    }
}
