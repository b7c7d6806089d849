//! Host commands on a node: `execNode` (`sh -c`) and node `script` (`bash -euo pipefail -c`),
//! run through `nsenter` into PID 1's namespaces. Stdout goes to `var`, and to
//! `varPerNode` as `{"<node>": stdout}`, which the controller merges across nodes.

use pseudoflow_crd::protocol::StepResult;
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

/// Runs a host command; `script` selects bash with strict flags.
pub async fn run(
    ctx: &ExecCtx,
    code: &str,
    script: bool,
    var: Option<&str>,
    var_per_node: Option<&str>,
) -> Result<StepResult, StepError> {
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
