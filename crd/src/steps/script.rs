//! `script`: a bash script, on the node (inside `loopNodes` or with `nodeSelector`, through
//! `nsenter`) or in the step's own pod; stdout goes to `var`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_node_selector, Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::RunOn;
use crate::selector::LabelSelector;

/// Runs `code` with `bash -euo pipefail`; the step's `timeoutSeconds` bounds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScriptStep {
    /// The script, run with `bash -euo pipefail`: a failing command fails the step.
    pub code: String,
    /// Variable that receives stdout (one trailing newline trimmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub var: Option<String>,
    /// Makes this a node step outside loopNodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// With `nodeSelector`: all (default): every node must succeed; any: one success is enough; first: first node by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_on: Option<RunOn>,
    /// In a node context: run only if an earlier step for the same node reported `changed` in
    /// this run (only this run counts, as for `execNode`). Default false: it runs every time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub only_if_changed: bool,
    /// Also write the command's stdout and stderr to the step pod's log, line by line, for
    /// `kubectl pf logs` (at most 1,000 lines per stream). Off by default: stdout may carry
    /// values read from Secrets, and a pod's log is readable by anyone with `pods/log` in the
    /// namespace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log_output: bool,
}

impl StepParams for ScriptStep {
    fn placement(&self, in_node_context: bool) -> Placement {
        if in_node_context || self.node_selector.is_some() {
            Placement::Node
        } else {
            Placement::Api
        }
    }

    fn plan_as() -> PlanAs {
        PlanAs::NoChange
    }

    fn validate(&self, ctx: &mut Ctx) {
        if self.code.trim().is_empty() {
            ctx.error("code", "must not be empty");
        }
        if let Some(v) = &self.var {
            ctx.var_name("var", v);
        }
        check_node_selector(ctx, self.node_selector.as_ref(), false);
        if self.run_on.is_some() && self.node_selector.is_none() {
            ctx.error("runOn", "runOn needs nodeSelector");
        }
        if self.only_if_changed && !ctx.in_node_context {
            ctx.error(
                "onlyIfChanged",
                "only applies inside loopNodes, where earlier steps changed the same node",
            );
        }
    }

    fn outputs(&self) -> Vec<&str> {
        self.var.as_deref().into_iter().collect()
    }

    fn shell_fields(&self) -> &'static [&'static str] {
        &["code"]
    }

    fn only_if_changed(&self) -> bool {
        self.only_if_changed
    }

    fn node_targeting(&self) -> Option<(&LabelSelector, RunOn)> {
        self.node_selector
            .as_ref()
            .map(|s| (s, self.run_on.unwrap_or_default()))
    }
}
