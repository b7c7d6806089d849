//! `exec`: run a shell command under the flow's identity — in the step's own pod (optionally
//! with another `image`, e.g. one with kubectl) or in a named pod's container via pods/exec —
//! and keep its stdout in a variable.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, StepParams};
use crate::validate::Ctx;

/// Runs `cmd` with `sh -c`; stdout (one trailing newline trimmed) goes to `var`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecStep {
    /// Command run with `sh -c`; a non-zero exit fails the step.
    pub cmd: String,
    /// Variable that receives stdout (one trailing newline trimmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub var: Option<String>,
    /// Run inside this existing pod (pods/exec; the flow's ServiceAccount needs `get` and
    /// `create` on `pods/exec`) instead of the step's own pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Container of `pod` to run in; may be left out when the pod has a single container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Namespace of `pod` (default: the flow's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Image of the step's own pod when `pod` is not given (default: the runtime image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl StepParams for ExecStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn validate(&self, ctx: &mut Ctx) {
        if self.cmd.trim().is_empty() {
            ctx.error("cmd", "must not be empty");
        }
        if let Some(v) = &self.var {
            ctx.var_name("var", v);
        }
        if self.pod.is_none() && (self.container.is_some() || self.namespace.is_some()) {
            ctx.error(
                "pod",
                "container and namespace select where to exec: give pod too",
            );
        }
        if self.pod.is_some() && self.image.is_some() {
            ctx.error(
                "image",
                "image applies to the step's own pod; it cannot be combined with pod",
            );
        }
    }

    fn outputs(&self) -> Vec<&str> {
        self.var.as_deref().into_iter().collect()
    }

    fn shell_fields(&self) -> &'static [&'static str] {
        &["cmd"]
    }
}
