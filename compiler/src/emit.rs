//! A sample instance of a node — run 1, first item of each loop, a named node — so a person
//! (`pseudoflow-compile --emit`) or a snapshot test can see exactly what would be created.

use crate::compile::Compiled;
use crate::lower::{lower, task_of, FlowRef, LowerError, LowerOptions, Lowered, NodeInstance};
use crate::names;
use crate::plan::{LoopOver, NodeKind};

/// Lowers node `node_id` of `compiled` as it would run in run 1 on node `node_name`.
pub fn emit_node(
    compiled: &Compiled,
    flow: &FlowRef,
    node_id: &str,
    node_name: &str,
    opts: &LowerOptions,
) -> Result<Lowered, EmitError> {
    let plan = [Some(&compiled.plan), compiled.on_delete.as_ref()]
        .into_iter()
        .flatten()
        .find(|p| p.node(node_id).is_some())
        .ok_or_else(|| EmitError::NoSuchNode(node_id.to_string()))?;
    let node = plan.node(node_id).expect("found above");
    // A fused step runs in its segment's Job: show that Job, launched by the segment's head.
    let node = plan
        .node(plan.job_node(node))
        .expect("heads are plan nodes");
    if let Some(why) = &node.in_controller {
        return Err(EmitError::InController {
            node: node_id.to_string(),
            step_type: node.step_type.clone(),
            why: why.clone(),
        });
    }
    if task_of(node).is_none() {
        return Err(EmitError::NoJob {
            node: node_id.to_string(),
            step_type: node.step_type.clone(),
        });
    }
    let instance: Vec<String> = node
        .loops
        .iter()
        .map(|l| match plan.node(l).map(|n| &n.kind) {
            Some(NodeKind::LoopStart {
                over: LoopOver::Nodes { .. },
                ..
            }) => node_name.to_string(),
            _ => "0".into(),
        })
        .collect();
    let step = crate::expr::substitute_flow_vars(node, &compiled.spec);
    let members = crate::fuse::members_from(plan, node);
    let segment = crate::fuse::segment_steps(&members, |m| {
        Ok(crate::fuse::Prepared::Step(
            crate::expr::substitute_flow_vars(m, &compiled.spec),
        ))
    });
    // Offline there is no flow object: no uid.
    let run_id = names::run_id("", 1, None);
    let inst = NodeInstance {
        flow,
        run_id: &run_id,
        node,
        instance: &instance,
        attempt: 1,
        step,
        target_node: Some(node_name),
        artifacts: &compiled.spec.artifacts,
        segment,
        changed_before: false,
        run_secret: None,
    };
    // The pod as it would run: the cluster's defaults (in `opts`) under the flow's settings.
    let opts = LowerOptions {
        executor: opts
            .executor
            .for_flow(compiled.spec.options.executor.as_ref()),
        ..opts.clone()
    };
    Ok(lower(&inst, &opts)?)
}

/// Why a node cannot be shown as a Job.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// The id names no node of the flow (nor of its onDelete steps).
    #[error("no node {0:?}; see the ids in the tree output")]
    NoSuchNode(String),
    /// The node is walked by the controller (a branch point, sleep, log, ...).
    #[error("node {node} ({step_type}) runs in the controller and has no Job")]
    NoJob {
        /// The node's id.
        node: String,
        /// Its step type.
        step_type: String,
    },
    /// The node is an API step the controller runs itself, as the flow's ServiceAccount.
    #[error(
        "node {node} ({step_type}) runs in the controller as the flow's ServiceAccount ({why}) \
         and has no Job; options.apiSteps: Job gives it one"
    )]
    InController {
        /// The node's id.
        node: String,
        /// Its step type.
        step_type: String,
        /// Why the compiler placed it there.
        why: String,
    },
    /// Lowering the node failed.
    #[error(transparent)]
    Lower(#[from] LowerError),
}

/// The input Secret and Job as one YAML stream (the Secret's input as readable `stringData`).
pub fn to_yaml(lowered: &Lowered) -> String {
    let input = serde_yaml::to_string(&lowered.input).expect("Secret renders");
    let job = serde_yaml::to_string(&lowered.job).expect("Job renders");
    format!("{input}---\n{job}")
}
