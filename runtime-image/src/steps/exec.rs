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
            process::run("sh", &args).await?.check("command")?.value()
        }
        Some(pod) => exec_in_pod(ctx, pod, step).await?,
    };
    Ok(with_var(
        StepResult::succeeded(true, "command succeeded"),
        step.var.as_deref(),
        stdout,
    ))
}

/// Runs an API-context `script` with bash in the executor's pod.
pub async fn script(code: &str, var: Option<&str>) -> Result<StepResult, StepError> {
    let args = ["-euo", "pipefail", "-c", code].map(String::from).to_vec();
    let stdout = process::run("bash", &args).await?.check("script")?.value();
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
