//! `execNode`: run a host command on nodes (through `nsenter` into PID 1's namespaces), inside
//! `loopNodes` on the loop's node, elsewhere on the nodes picked by `nodeSelector` + `runOn`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_node_selector, Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::RunOn;
use crate::selector::LabelSelector;

/// Runs `cmd` on nodes; `var` gets stdout (single node), `varPerNode` gets `{node: stdout}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecNodeStep {
    /// Host command run with `sh -c` in the node's namespaces; a non-zero exit fails the step.
    pub cmd: String,
    /// Outside loopNodes: which nodes (`""` = every node, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// all: every node must succeed; any: one success is enough; first: first node by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_on: Option<RunOn>,
    /// Variable that receives stdout; meant for one node (use `varPerNode` for several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub var: Option<String>,
    /// Variable that receives `{node: stdout}`, merged over all the nodes the step ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub var_per_node: Option<String>,
    /// Run only if an earlier step for the same node reported `changed` in this run (a handler).
    /// Only this run counts: after a run that changed a node and failed before this step, the
    /// next run finds nothing changed and skips it. Default false: the command runs every time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub only_if_changed: bool,
    /// Also write the command's stdout and stderr to the step pod's log, line by line, for
    /// `kubectl pf logs` (at most 1,000 lines per stream). Off by default: stdout may carry
    /// values read from Secrets, and a pod's log is readable by anyone with `pods/log` in the
    /// namespace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log_output: bool,
}

impl StepParams for ExecNodeStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Node
    }

    fn plan_as() -> PlanAs {
        PlanAs::OnNodes
    }

    fn validate(&self, ctx: &mut Ctx) {
        if self.cmd.trim().is_empty() {
            ctx.error("cmd", "must not be empty");
        }
        check_node_selector(ctx, self.node_selector.as_ref(), false);
        if ctx.in_node_context && self.run_on.is_some() {
            ctx.error(
                "runOn",
                "inside loopNodes the step runs on the loop's node; remove runOn",
            );
        }
        for (field, v) in [("var", &self.var), ("varPerNode", &self.var_per_node)] {
            if let Some(v) = v {
                ctx.var_name(field, v);
            }
        }
        if self.var.is_some() && self.var_per_node.is_some() && self.var == self.var_per_node {
            ctx.error("varPerNode", "must differ from var");
        }
        if self.only_if_changed && !ctx.in_node_context {
            ctx.error(
                "onlyIfChanged",
                "only applies inside loopNodes, where earlier steps changed the same node",
            );
        }
    }

    fn outputs(&self) -> Vec<&str> {
        self.var
            .iter()
            .chain(self.var_per_node.iter())
            .map(String::as_str)
            .collect()
    }

    fn shell_fields(&self) -> &'static [&'static str] {
        &["cmd"]
    }

    fn only_if_changed(&self) -> bool {
        self.only_if_changed
    }

    fn node_targeting(&self) -> Option<(&LabelSelector, RunOn)> {
        Some((
            self.node_selector
                .as_ref()
                .unwrap_or(&crate::selector::EVERY_NODE),
            self.run_on.unwrap_or_default(),
        ))
    }
}
