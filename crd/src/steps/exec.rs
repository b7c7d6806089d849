//! `exec`: run a shell command under the flow's identity — in the step's own pod (optionally
//! with another `image`, e.g. one with a tool the runtime image lacks) or in a named pod's container via pods/exec —
//! and keep its stdout in a variable. The seed's form `{cmd, var?, container?, namespace?}`
//! (no `pod`) runs in the step's own pod: `namespace` is then the default namespace of the
//! command's kubectl context, `container` the name of that pod's container.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;

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
    /// With `pod`: its container to run in (may be left out when the pod has a single
    /// container). Without `pod`: the name of the step pod's container that runs the command
    /// (default `step`; `kubectl logs job/<job> -c <container>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// With `pod`: the pod's namespace. Without `pod`: the default namespace of the command's
    /// kubectl context (`kubectl get cm` lists this namespace's). Default: the flow's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Image of the step's own pod when `pod` is not given (default: the runtime image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Also write the command's stdout and stderr to the step pod's log, line by line, for
    /// `kubectl pf logs` (at most 1,000 lines per stream). Off by default: stdout may carry
    /// values read from Secrets, and a pod's log is readable by anyone with `pods/log` in the
    /// namespace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log_output: bool,
}

impl StepParams for ExecStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    /// A command in an existing pod is pods/exec, an API call the controller can make as the
    /// flow's ServiceAccount; never the step's own shell (`sh -c` without `pod`), and never
    /// with `logOutput` (the controller's log is no pod's log).
    fn runs_in_controller_once(&self) -> bool {
        self.pod.is_some() && !self.log_output
    }

    fn plan_as() -> PlanAs {
        PlanAs::NoChange
    }

    fn validate(&self, ctx: &mut Ctx) {
        if self.cmd.trim().is_empty() {
            ctx.error("cmd", "must not be empty");
        }
        if let Some(v) = &self.var {
            ctx.var_name("var", v);
        }
        if let Some(ns) = self.namespace.as_deref().filter(|n| !n.contains("${")) {
            if !crate::text::is_dns_label(ns) {
                ctx.error("namespace", format!("{ns:?} is not a valid namespace"));
            }
        }
        if let Some(c) = self.container.as_deref().filter(|c| !c.contains("${")) {
            if !crate::text::is_dns_label(c) {
                ctx.error("container", format!("{c:?} is not a valid container name"));
            }
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

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    fn check(steps: Value) -> Vec<String> {
        let (_, diags) = crate::validate::validate_spec(&json!({ "steps": steps }));
        diags
            .errors()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect()
    }

    #[test]
    fn the_seed_form_without_pod_is_accepted() {
        let errors = check(
            json!([{"type": "exec", "cmd": "kubectl get nodes", "var": "out",
            "container": "kubectl", "namespace": "kube-system"}]),
        );
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn namespace_and_container_must_be_names() {
        let errors = check(
            json!([{"type": "exec", "cmd": "true", "container": "Not_A_Name",
            "namespace": "also bad"}]),
        );
        assert_eq!(
            errors,
            [
                "spec.steps[0].namespace: \"also bad\" is not a valid namespace",
                "spec.steps[0].container: \"Not_A_Name\" is not a valid container name"
            ]
        );
    }
}
