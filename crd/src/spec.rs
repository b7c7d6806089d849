//! `spec` of a PseudoFlow: variables, steps, options, and the additions over the original DSL
//! (`serviceAccountName`, `artifacts`, `onDelete`).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::check::Ctx;
use crate::status::PseudoFlowStatus;
use crate::step::Step;
use crate::text::is_dns_subdomain;

/// A declarative operational flow: steps run by executor Jobs under `serviceAccountName`.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ops.example.com",
    version = "v1alpha1",
    kind = "PseudoFlow",
    plural = "pseudoflows",
    singular = "pseudoflow",
    shortname = "pf",
    doc = "PseudoFlow: a declarative operational flow run by the PseudoFlow operator.",
    namespaced,
    status = "PseudoFlowStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Step","type":"string","jsonPath":".status.currentStep"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress"}"#,
    printcolumn = r#"{"name":"Last Schedule","type":"date","jsonPath":".status.lastScheduleTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.message"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PseudoFlowSpec {
    /// Variables for `${name}` substitution.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// The steps to run, in order (see docs/steps.md).
    #[schemars(length(max = crate::limits::MAX_STEPS))]
    pub steps: Vec<Step>,
    /// Run-wide options.
    #[serde(default)]
    pub options: FlowOptions,
    /// Identity every step runs with (default: `default` in the flow's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Where `applyFile`/`deleteFile` find their files (default: ConfigMap `pseudoflow-artifacts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ArtifactSource>,
    /// Steps run when the flow is deleted (behind a finalizer), e.g. a backup before teardown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::MAX_STEPS))]
    pub on_delete: Option<Vec<Step>>,
    /// Runs start on this cron schedule instead of on every spec change (docs/schedules.md):
    /// 5 fields as CronJob's, or 6 with seconds first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::schedule::MAX_SCHEDULE_CHARS))]
    pub schedule: Option<String>,
    /// IANA time zone `schedule` is read in (default UTC), e.g. `Europe/Berlin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub time_zone: Option<String>,
    /// A slot missed by more than this many seconds (controller down, Forbid) does not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::MAX_DURATION_SECONDS))]
    pub starting_deadline_seconds: Option<u32>,
    /// No new run starts (scheduled or from a spec change); a running run holds: its running
    /// steps finish and no new step starts until `suspend` is false again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// A library for `includeFlow`: this flow never runs on its own (not when created or
    /// changed, not from the run annotation); the flows that include it run its steps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_only: bool,
    /// Serve every object of a kind, each with its own runs, status and `onDelete`
    /// (docs/bound-flows.md); the flow then runs no steps of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<crate::bind::Bind>,
    /// Set by the controller on the flow it made for one bound object (never by hand): the
    /// object and what started the run, as the variables `object` and `trigger`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<crate::bind::Bound>,
    /// With `bind`: how the revisions of the flow's steps are kept (docs/bound-flows.md#revisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::Rollout>,
    /// How `${...}` enters shell commands: `quoted` (one shell word; `${x | raw}` opts out) or
    /// `raw` (as written). Default: `raw` in `v1alpha1`, `quoted` in `v1beta1`; the API server
    /// stores it, so a flow keeps what it was written for (docs/decisions.md#quoted-by-default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell_quoting: Option<crate::quoting::ShellQuoting>,
    /// Pod settings (`image`, `namespace`, `nodeSelector`, `serviceAccountName`) that may be
    /// taken from a bound object's data; any other is refused when an expression reads it.
    /// `targetNamespace` lets the object choose where a `copy` writes and a `delete` with
    /// `onlyCopies` deletes; `nodeFileLines` lets its line breaks into node files (both warned).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_object_data: Vec<crate::quoting::ObjectDataField>,
}

/// Run-wide options.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowOptions {
    /// A run due while another runs: Allow (default) starts it too, Forbid queues it, Replace aborts the other.
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    /// Fail the whole run (reason Timeout) after this long (at most 7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::MAX_DURATION_SECONDS))]
    pub timeout_seconds: Option<u32>,
    /// Where API steps that are safe to repeat (apply, delete, waitFor, labels, copy) run:
    /// Auto (default) runs them in the controller as the flow's ServiceAccount for a flow bound
    /// to a kind, in executor Jobs otherwise; Controller or Job decide for this flow
    /// (docs/decisions.md#api-steps-in-the-controller).
    #[serde(default, skip_serializing_if = "ApiSteps::is_auto")]
    pub api_steps: ApiSteps,
    /// How many succeeded runs keep their Jobs, pods, input Secrets and result ConfigMaps
    /// (the current run's always stay); older ones are deleted. Default: the controller's
    /// (3 unless the chart says otherwise). At most 5, the runs `status.previousRuns` knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = crate::status::MAX_PREVIOUS_RUNS))]
    pub successful_runs_history_limit: Option<u32>,
    /// How many failed runs keep their objects (as `successfulRunsHistoryLimit`); the run a
    /// retry would start from (the current one) always stays. Default: the controller's (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = crate::status::MAX_PREVIOUS_RUNS))]
    pub failed_runs_history_limit: Option<u32>,
    /// Settings of the pods that run the flow's steps: resources, tolerations, nodeSelector,
    /// affinity, priorityClassName, imagePullSecrets, extra labels and annotations (over the
    /// cluster's defaults from the chart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<crate::executor::ExecutorOptions>,
    /// Which Events a run publishes: All (default: each step's start and end, and the run's
    /// outcome), Runs (the run's own Events and every Warning, no per-step Normal ones) or
    /// Warnings (failures and refusals only). A flow bound to a kind that serves thousands of
    /// objects may not want three Events per object (docs/decisions.md#events-a-run-publishes).
    #[serde(default, skip_serializing_if = "EventPolicy::is_all")]
    pub events: EventPolicy,
}

/// Which Events a run publishes (see [`FlowOptions::events`]); status, metrics and logs are the
/// same under each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum EventPolicy {
    #[default]
    /// Every Event: each step's start and end, the run's outcome, every Warning.
    All,
    /// The run's own Events (its outcome, an approval awaited, a retry, `log` messages) and
    /// every Warning; no Normal Event per step.
    Runs,
    /// Warnings only: a step or run that failed, a refusal.
    Warnings,
}

/// The Normal Events told once per step, which [`EventPolicy::Runs`] leaves out.
const PER_STEP_REASONS: [&str; 3] = ["StepStarted", "StepSucceeded", "StepSkipped"];

impl EventPolicy {
    /// Whether this is the default (not written out).
    pub fn is_all(&self) -> bool {
        *self == EventPolicy::All
    }

    /// Whether an Event of this kind (`warning` or Normal) and `reason` is published.
    pub fn publishes(self, warning: bool, reason: &str) -> bool {
        match self {
            EventPolicy::All => true,
            EventPolicy::Runs => warning || !PER_STEP_REASONS.contains(&reason),
            EventPolicy::Warnings => warning,
        }
    }
}

/// Where a flow's repeatable API steps run (see [`FlowOptions::api_steps`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum ApiSteps {
    #[default]
    /// In the controller for a flow bound to a kind (an object's reconcile answers in
    /// milliseconds), in executor Jobs for any other flow.
    Auto,
    /// In the controller, as the flow's ServiceAccount (impersonated): no pod per step.
    Controller,
    /// In executor Jobs, as every other step.
    Job,
}

impl ApiSteps {
    /// Whether this is the default (not written out).
    pub fn is_auto(&self) -> bool {
        *self == ApiSteps::Auto
    }
}

/// What happens when a new run is due while one is running.
///
/// Allow: start it beside the old one. Forbid: queue it until the running one ends.
/// Replace: abort the running one (its Jobs are deleted) and start the new one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum ConcurrencyPolicy {
    #[default]
    /// Start the new run beside the running one.
    Allow,
    /// Queue the new run until the running one ends.
    Forbid,
    /// Abort the running run (its Jobs are deleted) and start the new one.
    Replace,
}

/// ConfigMap read when a flow declares no `spec.artifacts` (the seed's flows declare none).
pub const DEFAULT_ARTIFACTS_CONFIGMAP: &str = "pseudoflow-artifacts";

impl PseudoFlowSpec {
    /// The parsed `schedule` in `timeZone`, if the flow has one.
    pub fn parsed_schedule(
        &self,
    ) -> Option<Result<crate::schedule::Schedule, crate::schedule::ScheduleError>> {
        let cron = self.schedule.as_deref()?;
        Some(crate::schedule::Schedule::parse(
            cron,
            self.time_zone.as_deref(),
        ))
    }

    /// How this flow inserts `${...}` into commands (`raw` when the field is absent: only a
    /// `v1alpha1` flow read without the API server's defaulting lacks it).
    pub fn quoting(&self) -> crate::quoting::ShellQuoting {
        self.shell_quoting.unwrap_or_default()
    }

    /// The variables the controller provides beside `vars`: `object` and `trigger` in a flow
    /// bound to a kind (and in the flows it makes for each object).
    pub fn bound_vars(&self) -> &'static [&'static str] {
        if self.bind.is_some() || self.bound.is_some() {
            &[crate::bind::OBJECT_VAR, crate::bind::TRIGGER_VAR]
        } else {
            &[]
        }
    }

    /// Where `applyFile`/`deleteFile` look, in order: `spec.artifacts`, or the default ConfigMap.
    pub fn artifact_sources(&self) -> Vec<ArtifactSource> {
        if self.artifacts.is_empty() {
            vec![ArtifactSource {
                config_map: Some(DEFAULT_ARTIFACTS_CONFIGMAP.into()),
                url: None,
            }]
        } else {
            self.artifacts.clone()
        }
    }
}

/// One place artifact files are read from: a ConfigMap (keys are file names) or an http(s)
/// base URL (`<url>/<path>`). Sources are searched in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactSource {
    /// A ConfigMap in the flow's namespace whose keys are the file names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
    /// An http(s) base URL; a file is read from `<url>/<path>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl ArtifactSource {
    /// Exactly one of configMap and url; a valid name or an http(s) URL.
    pub fn validate(&self, ctx: &mut Ctx) {
        match (&self.config_map, &self.url) {
            (Some(_), Some(_)) => ctx.error("", "give configMap or url, not both"),
            (None, None) => ctx.error(
                "",
                "give configMap (a ConfigMap name) or url (an http(s) base URL)",
            ),
            (Some(cm), None) if !is_dns_subdomain(cm) => {
                ctx.error("configMap", format!("{cm:?} is not a valid ConfigMap name"))
            }
            (None, Some(url)) if !(url.starts_with("https://") || url.starts_with("http://")) => {
                ctx.error("url", format!("{url:?} is not an http(s) URL"))
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod event_policy_tests {
    use super::EventPolicy;

    #[test]
    fn runs_leaves_out_only_the_normal_events_told_per_step() {
        let runs = EventPolicy::Runs;
        for reason in ["StepStarted", "StepSucceeded", "StepSkipped"] {
            assert!(!runs.publishes(false, reason), "{reason}");
        }
        for reason in ["RunSucceeded", "WaitingForApproval", "Retrying", "Log"] {
            assert!(runs.publishes(false, reason), "{reason}");
        }
        assert!(runs.publishes(true, "StepFailed"));
    }

    #[test]
    fn warnings_publishes_every_warning_and_nothing_normal_while_all_publishes_everything() {
        for reason in ["StepFailed", "RunFailed", "StepAborted", "ChildRefused"] {
            assert!(EventPolicy::Warnings.publishes(true, reason), "{reason}");
        }
        for reason in ["RunSucceeded", "Log", "StepStarted", "WaitingForApproval"] {
            assert!(!EventPolicy::Warnings.publishes(false, reason), "{reason}");
            assert!(EventPolicy::All.publishes(false, reason), "{reason}");
        }
    }

    #[test]
    fn the_default_is_all_and_is_not_written_out() {
        let options: super::FlowOptions = serde_json::from_str("{}").unwrap();
        assert_eq!(options.events, EventPolicy::All);
        let written = serde_json::to_value(&options).unwrap();
        assert!(written.get("events").is_none(), "{written}");
        let runs: super::FlowOptions = serde_json::from_str(r#"{"events": "Runs"}"#).unwrap();
        assert_eq!(runs.events, EventPolicy::Runs);
    }
}
