//! `patchFile`: regex replace in a node file. No match and no `createIfMissing` is a success
//! with `changed: false`; the previous content is kept once per run as `<path>.pseudoflow.bak`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_node_path, check_node_selector, Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::RunOn;
use crate::selector::LabelSelector;

/// Replaces every match of `pattern` in the file with `replace` (`$1` refers to groups).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchFileStep {
    /// Absolute path of the file on the node.
    pub path: String,
    /// Regular expression (Rust `regex` syntax) matched against the file.
    pub pattern: String,
    /// Replacement for each match; `$1` inserts the first group.
    pub replace: String,
    /// When nothing matches (or the file is missing), append `replace` as a new line.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_if_missing: bool,
    /// Outside loopNodes: which nodes are patched (`""` = every node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

impl StepParams for PatchFileStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Node
    }

    fn plan_as() -> PlanAs {
        PlanAs::OnNodes
    }

    fn validate(&self, ctx: &mut Ctx) {
        check_node_path(ctx, "path", &self.path);
        check_node_selector(ctx, self.node_selector.as_ref(), true);
        if self.pattern.is_empty() {
            ctx.error("pattern", "must not be empty");
        } else {
            ctx.regex("pattern", &self.pattern);
        }
    }

    fn node_targeting(&self) -> Option<(&LabelSelector, RunOn)> {
        self.node_selector.as_ref().map(|s| (s, RunOn::All))
    }
}
