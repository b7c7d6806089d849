//! `configFile`: write a whole file on nodes atomically (temp file + rename) with mode and
//! owner; reports `changed: false` when content, mode and owner already match.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_node_path, check_node_selector, Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::RunOn;
use crate::selector::LabelSelector;

/// Ensures the file at `path` has exactly `content`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFileStep {
    /// Absolute path of the file on the node.
    pub path: String,
    /// The whole content the file gets.
    pub content: String,
    /// Octal permission bits, e.g. `"0644"` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `user:group` as names or numeric ids, e.g. `root:root` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Outside loopNodes: which nodes get the file (`""` = every node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

impl StepParams for ConfigFileStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Node
    }

    fn plan_as() -> PlanAs {
        PlanAs::OnNodes
    }

    fn validate(&self, ctx: &mut Ctx) {
        check_node_path(ctx, "path", &self.path);
        check_node_selector(ctx, self.node_selector.as_ref(), true);
        if let Some(mode) = &self.mode {
            check_mode(ctx, "mode", mode);
        }
        if let Some(owner) = &self.owner {
            check_owner(ctx, "owner", owner);
        }
    }

    fn node_targeting(&self) -> Option<(&LabelSelector, RunOn)> {
        self.node_selector.as_ref().map(|s| (s, RunOn::All))
    }
}

/// `mode` is 3 or 4 octal digits (`644`, `0640`).
pub fn check_mode(ctx: &mut Ctx, field: &str, mode: &str) {
    let digits = mode.strip_prefix("0o").unwrap_or(mode);
    let ok = (3..=4).contains(&digits.len()) && digits.chars().all(|c| ('0'..='7').contains(&c));
    if !ok {
        ctx.error(
            field,
            format!("{mode:?} is not an octal mode like \"0644\""),
        );
    }
}

/// `owner` is `user:group` (names or numeric ids) or just `user`.
pub fn check_owner(ctx: &mut Ctx, field: &str, owner: &str) {
    let valid_part = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    let ok = match owner.split_once(':') {
        Some((u, g)) => valid_part(u) && valid_part(g),
        None => valid_part(owner),
    };
    if !ok {
        ctx.error(field, format!("{owner:?} is not user:group"));
    }
}
