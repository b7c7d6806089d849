//! `template`: render a minijinja template (`{{ var }}`, `{% for %}`) with the flow's variables,
//! into a node file (`output` starting with `/`) or into a variable (any other `output`). The
//! template body is rendered once by the template engine and is not `${}`-substituted first, so
//! a variable's value is never evaluated as template code.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_node_path, check_node_selector, Placement, PlanAs, StepParams};
use crate::check::Ctx;
use crate::common::RunOn;
use crate::selector::LabelSelector;

/// Renders `template` into `output`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateStep {
    /// `/abs/path` writes a node file (like configFile); a name stores the text in that variable.
    pub output: String,
    /// Template text (minijinja: `{{ var }}`, `{% for %}`) rendered with the flow's variables; no `${}` substitution.
    pub template: String,
    /// For a file output outside loopNodes: which nodes (`""` = every node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// For a file output: octal permission bits (default `0644`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

impl TemplateStep {
    /// True when the output is a file on nodes rather than a variable.
    pub fn writes_file(&self) -> bool {
        self.output.starts_with('/')
    }
}

impl StepParams for TemplateStep {
    fn placement(&self, _: bool) -> Placement {
        if self.writes_file() {
            Placement::Node
        } else {
            Placement::Controller
        }
    }

    fn plan_as() -> PlanAs {
        PlanAs::NoChange
    }

    fn validate(&self, ctx: &mut Ctx) {
        if self.writes_file() {
            check_node_path(ctx, "output", &self.output);
            check_node_selector(ctx, self.node_selector.as_ref(), true);
            if let Some(mode) = &self.mode {
                super::config_file::check_mode(ctx, "mode", mode);
            }
        } else {
            ctx.var_name("output", &self.output);
            if self.node_selector.is_some() || self.mode.is_some() {
                ctx.error("output", "nodeSelector and mode apply to file outputs; start output with '/' to write a file");
            }
        }
    }

    fn outputs(&self) -> Vec<&str> {
        if self.writes_file() {
            Vec::new()
        } else {
            vec![&self.output]
        }
    }

    fn unsubstituted_fields(&self) -> &'static [&'static str] {
        &["template"]
    }

    fn node_targeting(&self) -> Option<(&LabelSelector, RunOn)> {
        self.node_selector.as_ref().map(|s| (s, RunOn::All))
    }
}
