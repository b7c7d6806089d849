//! `exec` and API-context `script`: a command in the executor's own pod (`sh -c`, or
//! `bash -euo pipefail -c` for scripts) or, with `pod`, in another pod via pods/exec. Stdout,
//! with one trailing newline trimmed, becomes the step's variable.

use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::steps::exec::ExecStep;
use serde_json::Value;

use crate::context::ExecCtx;
use crate::error::{Call, StepError};
use crate::process::{self, read_bounded, trim_newline, MAX_STDOUT};

/// Runs `exec`.
pub async fn run(ctx: &ExecCtx, step: &ExecStep) -> Result<StepResult, StepError> {
    let stdout = match &step.pod {
        None => {
            let args = vec!["-c".to_string(), step.cmd.clone()];
            let env = match &step.namespace {
                Some(ns) => kubectl_namespace_env(ns)?,
                None => Vec::new(),
            };
            process::run_with_env("sh", &args, &env)
                .await?
                .logged(step.log_output)
                .check("command")?
                .value()
        }
        Some(pod) => {
            let stdout = exec_in_pod(ctx, pod, step).await?;
            if step.log_output {
                process::log_lines("stdout", &stdout);
            }
            stdout
        }
    };
    Ok(with_var(
        StepResult::succeeded(true, "command succeeded"),
        step.var.as_deref(),
        stdout,
    ))
}

/// The environment that makes `ns` the default namespace of kubectl (and any client-go tool)
/// in the command: `POD_NAMESPACE`, which in-cluster configuration reads first (the pod's
/// ServiceAccount namespace otherwise); and, when the pod has a `KUBECONFIG`, a copy of its
/// first file whose current context has that namespace, put first (the first file's context
/// wins when kubeconfigs merge).
fn kubectl_namespace_env(ns: &str) -> Result<Vec<(String, String)>, StepError> {
    let mut env = vec![("POD_NAMESPACE".to_string(), ns.to_string())];
    let Some(paths) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) else {
        return Ok(env);
    };
    let paths = paths.to_string_lossy().into_owned();
    let first = paths.split(':').next().unwrap_or_default();
    let fail = |why: String| {
        StepError::failed(format!(
            "namespace {ns:?}: cannot set it in the kubeconfig {first}: {why}"
        ))
    };
    let text = std::fs::read_to_string(first).map_err(|e| fail(e.to_string()))?;
    let changed = with_context_namespace(&text, ns).map_err(|e| fail(e.to_string()))?;
    let dir = std::env::temp_dir().join(format!("pseudoflow-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| fail(e.to_string()))?;
    let copy = dir.join("kubeconfig");
    std::fs::write(&copy, changed).map_err(|e| fail(e.to_string()))?;
    env.push(("KUBECONFIG".into(), format!("{}:{paths}", copy.display())));
    Ok(env)
}

/// A kubeconfig's text with its current context's namespace set to `ns`.
fn with_context_namespace(text: &str, ns: &str) -> Result<String, KubeconfigError> {
    let mut cfg: serde_json::Value = serde_yaml::from_str(text)?;
    let current = cfg["current-context"]
        .as_str()
        .ok_or(KubeconfigError::NoCurrentContext)?
        .to_string();
    let context = cfg["contexts"]
        .as_array_mut()
        .and_then(|cs| cs.iter_mut().find(|c| c["name"] == current.as_str()))
        .ok_or(KubeconfigError::NoSuchContext(current))?;
    context["context"]["namespace"] = Value::String(ns.to_string());
    Ok(cfg.to_string())
}

/// Why exec's `namespace` could not be set in the pod's kubeconfig.
#[derive(Debug, thiserror::Error)]
enum KubeconfigError {
    #[error(transparent)]
    Yaml(#[from] serde_yaml::Error),
    #[error("it names no current-context")]
    NoCurrentContext,
    #[error("it has no context {0:?}")]
    NoSuchContext(String),
}

/// Runs an API-context `script` with bash in the executor's pod.
pub async fn script(
    code: &str,
    var: Option<&str>,
    log_output: bool,
) -> Result<StepResult, StepError> {
    let args = ["-euo", "pipefail", "-c", code].map(String::from).to_vec();
    let stdout = process::run("bash", &args)
        .await?
        .logged(log_output)
        .check("script")?
        .value();
    Ok(with_var(
        StepResult::succeeded(true, "script succeeded"),
        var,
        stdout,
    ))
}

/// Stores stdout in `var` when the step names one.
pub fn with_var(mut r: StepResult, var: Option<&str>, stdout: String) -> StepResult {
    if let Some(v) = var {
        r.vars.insert(v.to_string(), Value::String(stdout));
    }
    r
}

async fn exec_in_pod(ctx: &ExecCtx, pod: &str, step: &ExecStep) -> Result<String, StepError> {
    let ns = step
        .namespace
        .clone()
        .unwrap_or_else(|| ctx.namespace().to_string());
    let api: Api<Pod> = Api::namespaced(ctx.client().await?, &ns);
    let mut params = AttachParams::default()
        .stdin(false)
        .stdout(true)
        .stderr(true);
    if let Some(c) = &step.container {
        params = params.container(c.clone());
    }
    // A WebSocket exec is authorized twice: `get` (its HTTP verb) and `create`.
    let call = Call {
        verb: "get and create",
        resource: "pods/exec",
        name: pod,
        namespace: Some(&ns),
    };
    let mut proc = api
        .exec(pod, vec!["sh", "-c", step.cmd.as_str()], &params)
        .await
        .map_err(|e| ctx.api_err(e, call))?;
    let out = proc
        .stdout()
        .ok_or_else(|| StepError::failed("exec: no stdout stream"))?;
    let err = proc
        .stderr()
        .ok_or_else(|| StepError::failed("exec: no stderr stream"))?;
    let status = proc
        .take_status()
        .map(|s| s.boxed())
        .ok_or_else(|| StepError::failed("exec: no status"))?;
    let ((stdout, overflow), (stderr, _), status) = tokio::join!(
        read_bounded(out, MAX_STDOUT),
        read_bounded(err, MAX_STDOUT),
        status
    );
    let _ = proc.join().await;
    if overflow {
        return Err(StepError::failed(format!(
            "command wrote more than {MAX_STDOUT} bytes to stdout"
        )));
    }
    match status {
        Some(s) if s.status.as_deref() == Some("Success") => Ok(trim_newline(&stdout).to_string()),
        Some(s) => {
            let tail = process::tail(&stderr, 1000);
            Err(StepError::failed(
                format!(
                    "command in pod {ns}/{pod} failed: {} {tail}",
                    s.message.unwrap_or_default()
                )
                .trim_end()
                .to_string(),
            ))
        }
        None => Err(StepError::failed(format!(
            "command in pod {ns}/{pod} ended without a status"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_context_gets_the_namespace_and_nothing_else_changes() {
        let text = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:6443'}\nusers:\n- name: u\n  user: {tokenFile: /t}\ncontexts:\n- name: other\n  context: {cluster: c, user: u, namespace: a}\n- name: c\n  context: {cluster: c, user: u, namespace: flows}\ncurrent-context: c\n";
        let out: serde_json::Value =
            serde_yaml::from_str(&with_context_namespace(text, "kube-system").unwrap()).unwrap();
        assert_eq!(out["contexts"][1]["context"]["namespace"], "kube-system");
        assert_eq!(out["contexts"][1]["context"]["user"], "u");
        assert_eq!(out["contexts"][0]["context"]["namespace"], "a");
        assert_eq!(out["users"][0]["user"]["tokenFile"], "/t");
        let e = with_context_namespace("contexts: []\n", "x").unwrap_err();
        assert!(e.to_string().contains("no current-context"), "{e}");
        let e = with_context_namespace("current-context: gone\ncontexts: []\n", "x").unwrap_err();
        assert!(e.to_string().contains("no context \"gone\""), "{e}");
    }
}
