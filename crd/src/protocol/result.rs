//! What an executor reports back about one node instance. The executor writes it as JSON to its
//! termination message (small results) or, when larger than fits there, to a ConfigMap named in
//! the termination message; the controller folds it into the run's state.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Kubernetes keeps at most 4096 bytes of a termination message; results up to this size go
/// there directly, larger ones through [`StepResult::result_config_map`].
pub const TERMINATION_MESSAGE_LIMIT: usize = 3800;

/// The outcome of one node instance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepResult {
    /// False when the step failed; `message` says why (never containing secret values).
    pub ok: bool,
    /// Whether the step changed anything; false on a no-op re-run.
    #[serde(default)]
    pub changed: bool,
    /// What happened, for status and Events (so it never contains secret values).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Variables the step sets (`var`, `varPerNode` parts, `template` outputs).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, Value>,
    /// For [`crate::protocol::Task::Condition`]: whether the condition holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<bool>,
    /// For [`crate::protocol::Task::ListNodes`]: matching node names, sorted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// For [`crate::protocol::Task::FetchInclude`]: the fetched document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<IncludedDocument>,
    /// Set in the termination message when the full result was too large for it: the name of
    /// the ConfigMap (key `result.json`, in the flow's namespace) holding the full result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_config_map: Option<String>,
    /// With `result_config_map`: SHA-256 of the full result it holds. The termination message
    /// is written by the executor alone; the ConfigMap may be changed by anyone who can update
    /// ConfigMaps in the namespace, so the controller accepts its content only with this digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_sha256: Option<String>,
    /// The whole result, sealed ([`super::sealed`], base64): what the executor reports when
    /// its input gave it a result key. Beside it only `ok` is in the clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<String>,
    /// For a fused segment: each step that ran (or was recorded as run), in order; the
    /// fields above then summarise the segment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segment: Vec<MemberResult>,
}

/// The outcome of one step of a fused segment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberResult {
    /// The step's DAG node.
    pub node_id: String,
    /// What it reported.
    pub result: StepResult,
    /// When it started and ended (unix milliseconds), for status and the duration metric.
    pub started_ms: i64,
    /// See `started_ms`.
    pub finished_ms: i64,
}

/// An `include` source's content, classified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "as")]
pub enum IncludedDocument {
    /// Kubernetes objects; the executor has already applied them.
    Manifests {
        /// `Kind/name` of each applied object, for the step's message.
        applied: Vec<String>,
    },
    /// Steps to run in place (raw JSON; the controller validates and compiles them).
    Steps {
        /// The step list, unvalidated: the controller checks it like a spec's steps.
        steps: Value,
        /// For `includeFlow`: the included flow's `spec.vars`, its steps' defaults.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        vars: BTreeMap<String, String>,
    },
    /// Steps held by key `key` of Secret `name` (in the flow's namespace), reported by
    /// reference: a result is readable by whoever may read pods, Secret content must not be.
    /// The controller reads the Secret and runs the steps only if their SHA-256 is `sha256`,
    /// the digest of what the flow's identity read.
    SecretSteps {
        /// The Secret holding the steps.
        name: String,
        /// The key within it.
        key: String,
        /// SHA-256 of the content the executor read, which the controller's re-read must match.
        sha256: String,
    },
}

impl StepResult {
    /// A failed result with a message.
    pub fn failed(message: impl Into<String>) -> Self {
        StepResult {
            ok: false,
            message: message.into(),
            ..Default::default()
        }
    }

    /// A successful result.
    pub fn succeeded(changed: bool, message: impl Into<String>) -> Self {
        StepResult {
            ok: true,
            changed,
            message: message.into(),
            ..Default::default()
        }
    }

    /// This result as the executor reports it under `key` for Job `job`: sealed whole, with
    /// only `ok` in the clear.
    pub fn sealed_for(&self, key: &str, job: &str) -> Self {
        let json = serde_json::to_vec(self).expect("results serialise");
        StepResult {
            ok: self.ok,
            sealed: Some(super::sealed::seal(key, job, &json)),
            ..Default::default()
        }
    }

    /// The result a report of Job `job` stands for when its run seals results under `key`: the
    /// sealed one, opened. One that does not open fails the step; an unsealed one (an executor
    /// that failed before it could read its input) can only fail it, and carries nothing but
    /// its message.
    pub fn opened(self, key: &str, job: &str) -> Self {
        let Some(sealed) = &self.sealed else {
            return match self.ok {
                true => StepResult::failed(
                    "the step's pod reported an unsealed success, which its executor never does: refused",
                ),
                false => StepResult::failed(self.message),
            };
        };
        let opened = super::sealed::open(key, job, sealed)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<StepResult>(&b).map_err(|e| e.to_string()));
        match opened {
            Ok(r) if r.sealed.is_none() => r,
            Ok(_) => StepResult::failed("the step's sealed result is sealed twice"),
            Err(e) => StepResult::failed(format!("the step's result was refused: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip_through_json() {
        let mut r = StepResult::succeeded(true, "applied 3 objects");
        r.vars
            .insert("unlabeled".into(), Value::String("a b".into()));
        r.include = Some(IncludedDocument::Steps {
            steps: serde_json::json!([{"type": "log", "message": "x"}]),
            vars: BTreeMap::new(),
        });
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<StepResult>(&text).unwrap(), r);
        assert!(text.contains("\"as\":\"steps\""), "{text}");
    }

    #[test]
    fn a_sealed_result_opens_for_its_job_only_and_unsealed_ones_only_fail() {
        let mut r = StepResult::succeeded(true, "ran");
        r.vars
            .insert("token".into(), Value::String("canary-1".into()));
        let sealed = r.sealed_for("k", "job-a");
        let text = serde_json::to_string(&sealed).unwrap();
        assert!(!text.contains("canary") && !text.contains("ran"), "{text}");
        assert_eq!(sealed.clone().opened("k", "job-a"), r);
        let other = sealed.opened("k", "job-b");
        assert!(!other.ok && other.message.contains("refused"), "{other:?}");
        let forged = StepResult::succeeded(true, "x").opened("k", "job-a");
        assert!(!forged.ok && forged.vars.is_empty(), "{forged:?}");
        let early = StepResult::failed("input unreadable").opened("k", "job-a");
        assert_eq!(early, StepResult::failed("input unreadable"));
    }
}
