//! Reporting a result: sealed under the key the input carries (`crd::protocol::sealed`: the
//! result holds the step's variables, which may come from Secrets, and `view` reads pods and
//! ConfigMaps), then small results go to the termination message as JSON; larger ones are
//! stored in a ConfigMap `<job>-result` (key `result.json`) and the termination message only
//! points at it (with the full result's SHA-256, which the controller checks: the ConfigMap may
//! be changed by others, the termination message only by this pod), because Kubernetes keeps at
//! most 4 KiB of a termination message.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use pseudoflow_crd::protocol::label_value;
use pseudoflow_crd::protocol::{StepResult, TERMINATION_MESSAGE_LIMIT};
use pseudoflow_crd::protocol::{JOB_NAME_ENV, LABEL_FLOW, LABEL_MANAGED_BY, LABEL_RUN, MANAGED_BY};
use serde_json::json;

use crate::context::ExecCtx;
use crate::error::StepError;

/// Key of the full result in the result ConfigMap.
pub const RESULT_KEY: &str = "result.json";
/// Default termination message path (the kubelet's default).
pub const DEFAULT_TERMINATION_LOG: &str = "/dev/termination-log";
/// How much of the message a spilled result's pointer repeats.
const POINTER_MESSAGE_MAX: usize = 1000;

/// How a result is delivered.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// The JSON fits in the termination message.
    Inline(String),
    /// The full JSON goes to ConfigMap `config_map`; `pointer` goes to the termination message.
    Spill {
        /// Name of the ConfigMap that holds the full result.
        config_map: String,
        /// The full result JSON, stored there.
        full: String,
        /// The small result naming the ConfigMap and the full result's digest.
        pointer: String,
    },
}

/// Decides how to deliver `result`, given the name the result ConfigMap would get.
pub fn plan(result: &StepResult, config_map: &str) -> Delivery {
    let full = serde_json::to_string(result).expect("results serialise");
    if full.len() <= TERMINATION_MESSAGE_LIMIT {
        return Delivery::Inline(full);
    }
    let pointer = StepResult {
        ok: result.ok,
        changed: result.changed,
        message: crate::process::tail(&result.message, POINTER_MESSAGE_MAX).to_string(),
        result_config_map: Some(config_map.to_string()),
        result_sha256: Some(pseudoflow_crd::protocol::content_digest(full.as_bytes())),
        ..Default::default()
    };
    Delivery::Spill {
        config_map: config_map.to_string(),
        full,
        pointer: serde_json::to_string(&pointer).expect("results serialise"),
    }
}

/// What the pod's log says of `result`: a success's summary; never a failure's message, which
/// for `exec` and `script` ends with the command's stderr, and may repeat a value read from a
/// Secret (the controller redacts it before status; a pod's log is read with `pods/log`).
pub fn loggable(result: &StepResult) -> &str {
    if result.ok {
        &result.message
    } else {
        "(failed: the reason is in the step's status, not in this log)"
    }
}

/// The executor's Job name: `PSEUDOFLOW_JOB_NAME`, else `JOB_NAME`, else the hostname (the pod
/// name, which is unique too).
pub fn job_name() -> String {
    [JOB_NAME_ENV, "JOB_NAME", "HOSTNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "pseudoflow-step".into())
}

/// Delivers `result`: stores a large one in its ConfigMap first, then writes the termination
/// message. Never to the pod's log: the result carries the step's variables, which may hold
/// values read from Secrets, and a pod's log is readable by anyone with `pods/log`. Returns
/// whether the delivered result is ok: false also when a large result could not be stored.
pub async fn deliver(ctx: &ExecCtx, result: &StepResult) -> bool {
    let job = job_name();
    let cm_name = format!("{job}-result");
    let mut ok = result.ok;
    // Sealed, so neither the termination message nor a spilled ConfigMap shows more than `ok`.
    let reported = match &ctx.input.result_key {
        Some(key) => result.sealed_for(key, &job),
        None => result.clone(),
    };
    let message = match plan(&reported, &cm_name) {
        Delivery::Inline(text) => text,
        Delivery::Spill {
            config_map,
            full,
            pointer,
        } => match store(ctx, &config_map, full).await {
            Ok(()) => pointer,
            Err(e) => {
                ok = false;
                let failed = StepResult::failed(format!(
                    "the result ({} bytes) is too large for the termination message and could not be stored in ConfigMap {config_map}: {e}",
                    serde_json::to_string(result).map(|s| s.len()).unwrap_or(0)
                ));
                serde_json::to_string(&failed).expect("results serialise")
            }
        },
    };
    let path = std::env::var("PSEUDOFLOW_TERMINATION_LOG")
        .unwrap_or_else(|_| DEFAULT_TERMINATION_LOG.into());
    if let Err(e) = std::fs::write(&path, &message) {
        tracing::error!(path, error = %e, "cannot write the termination message");
        // The pod's log is what the kubelet falls back to (FallbackToLogsOnError): a failure
        // without the variables, so the controller learns why and nothing leaks.
        let lost = StepResult::failed(format!("cannot write the termination message {path}: {e}"));
        println!(
            "{}",
            serde_json::to_string(&lost).expect("results serialise")
        );
        return false;
    }
    ok
}

async fn store(ctx: &ExecCtx, name: &str, full: String) -> Result<(), StepError> {
    let client = ctx.client().await?;
    let ns = ctx.namespace();
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_MANAGED_BY, MANAGED_BY.to_string());
    labels.insert(LABEL_FLOW, label_value(&ctx.input.flow.name));
    labels.insert(LABEL_RUN, ctx.input.run_id.clone());
    // Owned by the flow (as the input is): it goes away with the flow, and `view` users see
    // which flow wrote it. Without blockOwnerDeletion, which would need rights on the flow.
    let flow = &ctx.input.flow;
    let owner = json!([{
        "apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "name": flow.name, "uid": flow.uid,
    }]);
    let cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "ownerReferences": owner},
        "data": {RESULT_KEY: full},
    });
    api.patch(
        name,
        &PatchParams::apply("pseudoflow").force(),
        &Patch::Apply(&cm),
    )
    .await
    .map(|_| ())
    .map_err(|e| {
        ctx.api_err(
            e,
            crate::error::Call {
                verb: "patch",
                resource: "configmaps",
                name,
                namespace: Some(ns),
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failures_message_is_never_logged() {
        let failed = StepResult::failed("command failed: password hunter2");
        assert!(!loggable(&failed).contains("hunter2"));
        let ok = StepResult::succeeded(true, "applied 1 object");
        assert_eq!(loggable(&ok), "applied 1 object");
    }

    #[test]
    fn small_results_go_inline() {
        let r = StepResult::succeeded(true, "applied 1 object");
        match plan(&r, "j-result") {
            Delivery::Inline(text) => {
                assert_eq!(serde_json::from_str::<StepResult>(&text).unwrap(), r)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn large_results_spill_into_a_config_map_with_a_small_pointer() {
        let mut r = StepResult::succeeded(false, "done");
        r.vars.insert("big".into(), json!("x".repeat(256 * 1024)));
        let Delivery::Spill {
            config_map,
            full,
            pointer,
        } = plan(&r, "j-result")
        else {
            panic!("expected a spill");
        };
        assert_eq!(config_map, "j-result");
        assert_eq!(serde_json::from_str::<StepResult>(&full).unwrap(), r);
        assert!(pointer.len() <= TERMINATION_MESSAGE_LIMIT);
        let p: StepResult = serde_json::from_str(&pointer).unwrap();
        assert_eq!(p.result_config_map.as_deref(), Some("j-result"));
        assert_eq!(
            p.result_sha256,
            Some(pseudoflow_crd::protocol::content_digest(full.as_bytes()))
        );
        assert!(p.ok && p.vars.is_empty() && p.message == "done");
    }

    #[test]
    fn spilled_pointers_stay_small_even_with_huge_messages() {
        let r = StepResult::failed("e".repeat(100_000));
        let Delivery::Spill { pointer, .. } = plan(&r, "j-result") else {
            panic!("expected a spill");
        };
        assert!(pointer.len() <= TERMINATION_MESSAGE_LIMIT);
    }
}
