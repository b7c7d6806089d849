//! `deleteFile`: the inverse of `applyFile` (deletes the objects of an artifact file), or, in a
//! node context (inside `loopNodes` or with `nodeSelector`), removes a file on the node.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_node_path, check_node_selector, Placement, PlanAs, Preview, StepParams};
use crate::check::Ctx;
use crate::common::RunOn;
use crate::selector::LabelSelector;
use crate::steps::apply_file::check_artifact_path;

/// Deletes the objects of an artifact file, or a file on nodes.
///
/// `${...}` in an artifact file is substituted inside its parsed string values
/// (docs/expressions.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteFileStep {
    /// Relative path of an artifact file whose objects are deleted or, on nodes, absolute path of the file.
    pub path: String,
    /// Makes this a node step outside `loopNodes`: which nodes lose the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

impl DeleteFileStep {
    fn on_node(&self, in_node_context: bool) -> bool {
        in_node_context || self.node_selector.is_some()
    }
}

impl StepParams for DeleteFileStep {
    fn placement(&self, in_node_context: bool) -> Placement {
        if self.on_node(in_node_context) {
            Placement::Node
        } else {
            Placement::Api
        }
    }

    fn plan_as() -> PlanAs {
        PlanAs::OnNodesInNodeContext(Preview::DeleteFile)
    }

    fn validate(&self, ctx: &mut Ctx) {
        if self.on_node(ctx.in_node_context) {
            check_node_path(ctx, "path", &self.path);
            check_node_selector(ctx, self.node_selector.as_ref(), false);
        } else {
            check_artifact_path(ctx, "path", &self.path);
        }
    }

    fn reads_body(&self) -> bool {
        true
    }

    fn node_targeting(&self) -> Option<(&LabelSelector, RunOn)> {
        self.node_selector.as_ref().map(|s| (s, RunOn::All))
    }
}
