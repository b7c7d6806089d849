//! `Task::Run`: one module per kind of work. API steps act with the pod's ServiceAccount; node
//! steps (the input names a `targetNode`) act on the node's files under the host root or run
//! host commands through `nsenter`.

pub mod apply;
pub mod artifacts;
pub mod delete;
pub mod exec;
pub mod exec_node;
pub mod labels;
pub mod node_file;
pub mod patch_file;
pub mod wait_for;

use pseudoflow_compiler::result::StepResult;
use pseudoflow_crd::{Step, StepKind};
use serde_json::Value;

use crate::context::Ctx;
use crate::error::StepError;

/// Performs the step.
pub async fn run(ctx: &Ctx, step: &Step) -> Result<StepResult, StepError> {
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
        StepKind::Exec(s) => exec::run(ctx, s).await,
        StepKind::Script(s) if on_node => {
            exec_node::run(ctx, &s.code, true, s.var.as_deref(), None).await
        }
        StepKind::Script(s) => exec::script(&s.code, s.var.as_deref()).await,
        StepKind::ExecNode(s) => {
            need_node()?;
            let (var, per_node) = (s.var.as_deref(), s.var_per_node.as_deref());
            exec_node::run(ctx, &s.cmd, false, var, per_node).await
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
        other => Err(StepError::input(format!(
            "step type {} is not run by the executor",
            other.type_name()
        ))),
    }
}
