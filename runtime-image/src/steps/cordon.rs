//! `cordon` and `uncordon`, and the cordon half of `drain`. A cordon this flow makes carries
//! its mark (`ops.example.com/cordoned-by: <namespace>/<flow>`); `uncordon` lifts only a cordon
//! with that mark, so a node someone else closed stays closed. Writes are merge patches that
//! carry the resourceVersion read, so a concurrent cordon is never overwritten unseen.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::steps::cordon::{
    cordon_owner, CORDONED_BY_ANNOTATION, CORDONED_RUN_ANNOTATION,
};
use serde_json::{json, Value};

use crate::context::ExecCtx;
use crate::error::{Call, StepError};

/// How a node stood after `cordon`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cordoned {
    /// This step closed it (and marked it as this flow's).
    Now,
    /// It was already closed by this flow (an earlier step or run).
    AlreadyOurs,
    /// It was already closed by someone else (`by`: their mark, or a description).
    Foreign(String),
}

impl Cordoned {
    /// Whether the cordon is this flow's to lift.
    pub fn ours(&self) -> bool {
        !matches!(self, Cordoned::Foreign(_))
    }
}

fn call<'a>(verb: &'a str, node: &'a str) -> Call<'a> {
    Call {
        verb,
        resource: "nodes",
        name: node,
        namespace: None,
    }
}

fn owner(ctx: &ExecCtx) -> String {
    cordon_owner(&ctx.input.flow.namespace, &ctx.input.flow.name)
}

/// Who holds a node's cordon, as a message can say it.
fn holder(node: &Node) -> String {
    match node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CORDONED_BY_ANNOTATION))
    {
        Some(by) => format!("flow {by}"),
        None => "someone else (no cordoned-by mark)".into(),
    }
}

fn mark(node: &Node) -> Option<&str> {
    node.metadata
        .annotations
        .as_ref()?
        .get(CORDONED_BY_ANNOTATION)
        .map(String::as_str)
}

fn unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

async fn get(ctx: &ExecCtx, api: &Api<Node>, name: &str) -> Result<Node, StepError> {
    match api.get_opt(name).await {
        Ok(Some(n)) => Ok(n),
        Ok(None) => Err(StepError::failed(format!(
            "{}: node {name:?} does not exist",
            ctx.input.path
        ))),
        Err(e) => Err(ctx.api_err(e, call("get", name))),
    }
}

/// A merge patch that applies only to the version `node` was read at (409 otherwise).
async fn patch_at(
    ctx: &ExecCtx,
    api: &Api<Node>,
    node: &Node,
    mut patch: Value,
) -> Result<bool, StepError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    patch["metadata"]["resourceVersion"] = json!(node.metadata.resource_version);
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if crate::error::api_status(&e).is_some_and(|s| s.code == 409) => Ok(false),
        Err(e) => Err(ctx.api_err(e, call("patch", &name))),
    }
}

/// Closes `name` to new pods, marking the cordon as this flow's only if this step closed it.
pub async fn cordon(ctx: &ExecCtx, name: &str) -> Result<Cordoned, StepError> {
    let api: Api<Node> = Api::all(ctx.client().await?);
    loop {
        let node = get(ctx, &api, name).await?;
        if unschedulable(&node) {
            return Ok(match mark(&node) {
                Some(m) if m == owner(ctx) => Cordoned::AlreadyOurs,
                _ => Cordoned::Foreign(holder(&node)),
            });
        }
        let patch = json!({
            "metadata": {"annotations": {
                CORDONED_BY_ANNOTATION: owner(ctx),
                CORDONED_RUN_ANNOTATION: ctx.input.run_id,
            }},
            "spec": {"unschedulable": true},
        });
        if patch_at(ctx, &api, &node, patch).await? {
            return Ok(Cordoned::Now);
        }
    }
}

/// What `uncordon` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uncordoned {
    /// This flow's cordon was lifted.
    Lifted,
    /// The node was not cordoned.
    NotCordoned,
    /// Someone else's cordon, left in place.
    LeftForeign(String),
}

/// Reopens `name` if its cordon is this flow's; a stale mark on a schedulable node is removed.
pub async fn uncordon(ctx: &ExecCtx, name: &str) -> Result<Uncordoned, StepError> {
    let api: Api<Node> = Api::all(ctx.client().await?);
    let clear = json!({"metadata": {"annotations": {
        CORDONED_BY_ANNOTATION: null,
        CORDONED_RUN_ANNOTATION: null,
    }}});
    loop {
        let node = get(ctx, &api, name).await?;
        let ours = mark(&node) == Some(owner(ctx).as_str());
        if !unschedulable(&node) {
            if ours && !patch_at(ctx, &api, &node, clear.clone()).await? {
                continue;
            }
            return Ok(Uncordoned::NotCordoned);
        }
        if !ours {
            return Ok(Uncordoned::LeftForeign(holder(&node)));
        }
        let mut patch = clear.clone();
        patch["spec"] = json!({"unschedulable": null});
        if patch_at(ctx, &api, &node, patch).await? {
            return Ok(Uncordoned::Lifted);
        }
    }
}

/// The `cordon` step.
pub async fn run_cordon(ctx: &ExecCtx, node: &str) -> Result<StepResult, StepError> {
    Ok(match cordon(ctx, node).await? {
        Cordoned::Now => StepResult::succeeded(true, format!("cordoned node {node}")),
        Cordoned::AlreadyOurs => StepResult::succeeded(
            false,
            format!("node {node} was already cordoned by this flow"),
        ),
        Cordoned::Foreign(by) => StepResult::succeeded(
            false,
            format!("node {node} was already cordoned by {by}; uncordon will leave it cordoned"),
        ),
    })
}

/// The `uncordon` step.
pub async fn run_uncordon(ctx: &ExecCtx, node: &str) -> Result<StepResult, StepError> {
    Ok(match uncordon(ctx, node).await? {
        Uncordoned::Lifted => StepResult::succeeded(true, format!("uncordoned node {node}")),
        Uncordoned::NotCordoned => {
            StepResult::succeeded(false, format!("node {node} was not cordoned"))
        }
        Uncordoned::LeftForeign(by) => StepResult::succeeded(
            false,
            format!("node {node} stays cordoned: it was cordoned by {by}, not by this flow"),
        ),
    })
}
