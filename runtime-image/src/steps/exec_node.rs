//! Host commands on a node: `execNode` (`sh -c`) and node `script` (`bash -euo pipefail -c`),
//! run through `nsenter` into PID 1's namespaces. Stdout goes to `var`, and to
//! `varPerNode` as `{"<node>": stdout}`, which the controller merges across nodes.

use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::steps::exec_node::ExecNodeStep;
use pseudoflow_crd::steps::script::ScriptStep;
use serde_json::{json, Value};

use crate::context::ExecCtx;
use crate::error::StepError;
use crate::process;

/// The program and arguments that run `shell_args` in the host's namespaces; with an empty
/// `nsenter` (tests) the shell runs directly.
pub fn host_command(nsenter: &str, shell_args: &[&str]) -> (String, Vec<String>) {
    let shell: Vec<String> = shell_args.iter().map(|s| s.to_string()).collect();
    if nsenter.is_empty() {
        return (shell[0].clone(), shell[1..].to_vec());
    }
    let mut args: Vec<String> = ["-t", "1", "-m", "-u", "-i", "-n", "-p", "--"]
        .map(String::from)
        .to_vec();
    args.extend(shell);
    (nsenter.to_string(), args)
}

/// A host command to run, as `execNode` or a node-context `script` gives it.
pub struct HostCommand<'a> {
    /// The command or script.
    pub code: &'a str,
    /// bash with strict flags (a `script`) instead of `sh -c`.
    pub script: bool,
    /// Variable for stdout.
    pub var: Option<&'a str>,
    /// Variable for `{node: stdout}`.
    pub var_per_node: Option<&'a str>,
    /// Write its output to the log too (`logOutput`).
    pub log_output: bool,
}

impl<'a> HostCommand<'a> {
    /// A node-context `script`.
    pub fn of_script(s: &'a ScriptStep) -> Self {
        HostCommand {
            code: &s.code,
            script: true,
            var: s.var.as_deref(),
            var_per_node: None,
            log_output: s.log_output,
        }
    }

    /// An `execNode`.
    pub fn of_exec_node(s: &'a ExecNodeStep) -> Self {
        HostCommand {
            code: &s.cmd,
            script: false,
            var: s.var.as_deref(),
            var_per_node: s.var_per_node.as_deref(),
            log_output: s.log_output,
        }
    }
}

/// Runs a host command.
pub async fn run(ctx: &ExecCtx, command: HostCommand<'_>) -> Result<StepResult, StepError> {
    let HostCommand {
        code,
        script,
        var,
        var_per_node,
        log_output,
    } = command;
    let shell: &[&str] = if script {
        &["bash", "-euo", "pipefail", "-c", code]
    } else {
        &["sh", "-c", code]
    };
    let (program, args) = host_command(&ctx.nsenter, shell);
    let node = ctx.input.target_node.clone().unwrap_or_default();
    let what = if script { "script" } else { "command" };
    ctx.note(format!("running {what} on node {node}"));
    let stdout = process::run(&program, &args)
        .await?
        .logged(log_output)
        .check(&format!("{what} on node {node}"))?
        .value();
    let mut r = StepResult::succeeded(true, format!("{what} succeeded on node {node}"));
    if let Some(v) = var {
        r.vars.insert(v.to_string(), Value::String(stdout.clone()));
    }
    if let Some(v) = var_per_node {
        r.vars.insert(v.to_string(), json!({ node: stdout }));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_enter_pid_1_namespaces() {
        let (p, a) = host_command("nsenter", &["sh", "-c", "id"]);
        assert_eq!(p, "nsenter");
        assert_eq!(a.join(" "), "-t 1 -m -u -i -n -p -- sh -c id");
        let (p, a) = host_command("", &["bash", "-c", "id"]);
        assert_eq!((p.as_str(), a.join(" ")), ("bash", "-c id".to_string()));
    }
}
