//! `spec.bind`: a flow bound to a kind serves every object of that kind, as a hand-written
//! operator would (docs/bound-flows.md). The controller gives each matching object a child flow
//! of its own, whose `spec.bound` carries the object and what started its run; the types of both
//! live here so the validator, the controller and the CRD agree on them.

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::check::Ctx;
use crate::selector::LabelSelector;

/// Label on every child flow, naming the bound flow it serves.
pub const BOUND_TO_LABEL: &str = "ops.example.com/bound-to";
/// Annotation on a child flow: `namespace/name` of the object it serves (what `kubectl pf get`
/// of the bound flow shows for it).
pub const OBJECT_ANNOTATION: &str = "ops.example.com/bound-object";
/// Prefix of the annotation an object names its child flow's UID by (one per bound flow): the
/// controller's proof a child is the bound flow's own (`controller/src/bind/claim.rs`); left out
/// of `${object}`, as the served mark is.
pub const CHILD_MARK_PREFIX: &str = "child.ops.example.com/";
/// Finalizer a bound flow holds while it has put finalizers on objects, so deleting it removes them.
pub const BIND_FINALIZER: &str = "ops.example.com/bind";
/// Annotation on a child flow the bound flow released (it is being deleted): the child's
/// `onDelete` does not run, the object stays as it is.
pub const RELEASED_ANNOTATION: &str = "ops.example.com/released";
/// The variable holding the bound object in every expression.
pub const OBJECT_VAR: &str = "object";
/// The variable saying what started the run (`event`, `changed`).
pub const TRIGGER_VAR: &str = "trigger";
/// Most failed objects the bound flow's status lists (the latest ones).
pub const MAX_FAILURES_SHOWN: usize = 5;
/// Most `watchFields`.
pub const MAX_WATCH_FIELDS: usize = 32;
/// Most `related` references.
pub const MAX_RELATED: usize = 8;

/// Binds the flow to a kind: every matching object gets its own runs, status and `onDelete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bind {
    /// API version of the kind, e.g. `example.com/v1` or `v1`.
    #[schemars(length(min = 1, max = 253))]
    pub api_version: String,
    /// The kind, e.g. `Database`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Only objects with matching labels (string or structured form); default: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "open_schema")]
    pub selector: Option<LabelSelector>,
    /// Objects in every namespace (the ServiceAccount needs a cluster-wide grant); default: the
    /// flow's own namespace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_namespaces: bool,
    /// jsonPaths (e.g. `.spec.password`) whose change also starts a run, besides create and a
    /// change of `metadata.generation`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_WATCH_FIELDS))]
    pub watch_fields: Vec<String>,
    /// Other objects each object names (e.g. the Secret a `SecSynch` copies): a change of one's
    /// content (not of its metadata or status) starts a new run of the object's flow, with
    /// `${trigger}` naming it. Read and watched as the flow's ServiceAccount.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_RELATED))]
    pub related: Vec<RelatedRef>,
    /// What is written back into each object's status.
    #[serde(default)]
    pub status: BindStatus,
    /// Where each object's run is recorded: `Object` runs the object's steps in the
    /// controller's memory and records the result only in the object (its status and a served
    /// mark), as a hand-written operator would: every step (`onDelete` steps too, run behind a
    /// finalizer on the object when it is deleted) must run in the controller (its `related`
    /// objects are followed there too, their versions kept in the mark); `Child` keeps a child flow (and its run state) per object. Unset (the
    /// default): `Object` when the flow allows it, else `Child`, as the compiler decides
    /// (docs/decisions.md#bound-flows-recorded-in-the-object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<BindRecord>,
    /// With `record: Object`: how a failed object is tried again (capped exponential backoff,
    /// as a kopf handler that raised is retried); default 10 s doubling to 300 s. A failure
    /// no attempt can mend (the step cannot be rendered from the object) is not retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<BindRetry>,
}

/// Default first wait before a failed object is tried again (`bind.retry.backoffSeconds`).
pub const DEFAULT_RETRY_BACKOFF_SECONDS: u32 = 10;
/// Default longest wait between two attempts (`bind.retry.maxBackoffSeconds`).
pub const DEFAULT_RETRY_MAX_BACKOFF_SECONDS: u32 = 300;
/// Largest `bind.retry` wait: a day.
pub const MAX_RETRY_BACKOFF_SECONDS: u32 = 86_400;

/// How a flow recorded in its objects tries a failed object again: after `backoffSeconds`,
/// then twice as long after each further failure, never longer than `maxBackoffSeconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindRetry {
    /// The wait after the first failure (seconds).
    #[serde(default = "default_backoff")]
    #[schemars(range(min = 1, max = MAX_RETRY_BACKOFF_SECONDS))]
    pub backoff_seconds: u32,
    /// The longest wait between two attempts (seconds); at least `backoffSeconds`.
    #[serde(default = "default_max_backoff")]
    #[schemars(range(min = 1, max = MAX_RETRY_BACKOFF_SECONDS))]
    pub max_backoff_seconds: u32,
}

fn default_backoff() -> u32 {
    DEFAULT_RETRY_BACKOFF_SECONDS
}

fn default_max_backoff() -> u32 {
    DEFAULT_RETRY_MAX_BACKOFF_SECONDS
}

impl Default for BindRetry {
    fn default() -> Self {
        BindRetry {
            backoff_seconds: DEFAULT_RETRY_BACKOFF_SECONDS,
            max_backoff_seconds: DEFAULT_RETRY_MAX_BACKOFF_SECONDS,
        }
    }
}

impl BindRetry {
    /// The wait after `failures` failures in a row (1: the first), in seconds.
    pub fn backoff(&self, failures: u32) -> u64 {
        let base = u64::from(self.backoff_seconds.max(1));
        let doublings = failures.saturating_sub(1).min(32);
        let wait = base.saturating_mul(1u64 << doublings);
        wait.min(u64::from(
            self.max_backoff_seconds.max(self.backoff_seconds),
        ))
    }

    fn validate(&self, ctx: &mut Ctx) {
        for (field, v) in [
            ("backoffSeconds", self.backoff_seconds),
            ("maxBackoffSeconds", self.max_backoff_seconds),
        ] {
            if !(1..=MAX_RETRY_BACKOFF_SECONDS).contains(&v) {
                ctx.error(
                    field,
                    format!("{v} is not between 1 and {MAX_RETRY_BACKOFF_SECONDS}"),
                );
            }
        }
        if self.max_backoff_seconds < self.backoff_seconds {
            ctx.error(
                "maxBackoffSeconds",
                format!(
                    "{} is less than backoffSeconds ({})",
                    self.max_backoff_seconds, self.backoff_seconds
                ),
            );
        }
    }
}

/// Where a bound flow records each object's run (see [`Bind::record`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum BindRecord {
    /// A child flow per object, with its runs, status, run state and `onDelete`.
    Child,
    /// Only in the object: its status and a served mark; no child flow, no run-state Secret.
    Object,
}

/// One object an object of the bound kind names, templated from `${object}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedRef {
    /// API version of its kind, e.g. `v1`.
    #[schemars(length(min = 1, max = 253))]
    pub api_version: String,
    /// Its kind, e.g. `Secret`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Its name, e.g. `${object.spec.secretName}`.
    #[schemars(length(min = 1, max = 512))]
    pub name: String,
    /// Its namespace, templated; only with `allNamespaces` (default: the object's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub namespace: Option<String>,
}

impl RelatedRef {
    /// The group (empty for the core group) and version of `apiVersion`.
    pub fn group_version(&self) -> (&str, &str) {
        split_api_version(&self.api_version)
    }
}

/// What the controller writes into a bound object's status (through its status subresource).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindStatus {
    /// The status field holding the phase: Creating while a run runs, Running when it
    /// succeeded, Failed (with `message`) when it failed. Empty: no phase is written.
    #[serde(default = "default_phase_field")]
    #[schemars(length(max = 63))]
    pub phase_field: String,
    /// More status fields, each rendered from `${...}` over the run's variables when a run
    /// succeeded (e.g. `podName: "${object.metadata.name}-pod"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, String>,
    /// Write standard `Ready`/`Progressing`/`Degraded` conditions with `observedGeneration`.
    #[serde(default = "yes")]
    pub conditions: bool,
}

fn default_phase_field() -> String {
    "phase".into()
}

fn yes() -> bool {
    true
}

impl Default for BindStatus {
    fn default() -> Self {
        BindStatus {
            phase_field: default_phase_field(),
            fields: BTreeMap::new(),
            conditions: true,
        }
    }
}

/// `spec.bound`, set by the controller on a child flow (never by hand): the object it serves and
/// what started its run. Its fields become the variables `object` and `trigger`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bound {
    /// The object (metadata name/namespace/uid/generation/labels/annotations and every
    /// top-level field but `status`).
    #[schemars(schema_with = "open_schema")]
    pub object: Value,
    /// `{event: create|update, changed: [jsonPaths]}`.
    #[schemars(schema_with = "open_schema")]
    pub trigger: Value,
    /// The kind's plural resource name, for writing its status.
    pub plural: String,
    /// What to write back into the object's status.
    #[serde(default)]
    pub status: BindStatus,
    /// The related objects' versions the run was started with (`Kind/name` to resourceVersion;
    /// versions only, never content), so that a change of one changes this spec.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub related: BTreeMap<String, String>,
}

fn open_schema(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

impl Bind {
    /// The group (empty for the core group) and version of `apiVersion`.
    pub fn group_version(&self) -> (&str, &str) {
        split_api_version(&self.api_version)
    }

    /// Checks every field, reporting each problem at its path under `spec.bind`.
    pub fn validate(&self, ctx: &mut Ctx) {
        check_type(ctx, &self.api_version, &self.kind, "Database");
        let k = &self.kind;
        let group = self.group_version().0;
        if group == crate::GROUP {
            // Every version: a flow serving flows makes, holds and overwrites other flows.
            ctx.error(
                "apiVersion",
                "a flow cannot be bound to the ops.example.com group (PseudoFlows, in any \
                 version): the controller writes those objects, and a flow serving them would \
                 create, hold (finalizers) and overwrite other flows",
            );
        }
        if group == "batch" && k == "Job" {
            ctx.error(
                "kind",
                "a flow cannot be bound to Jobs: the controller makes them for runs, and a flow \
                 serving them would hold and answer its own steps' Jobs",
            );
        }
        if self.group_version().0.is_empty() && k == "Secret" {
            // The object view is copied into each child flow's spec, which `view` reads: a
            // Secret's data would leave the Secret. `copy` moves Secret data without showing it.
            ctx.error(
                "kind",
                "a flow cannot be bound to Secrets: the object's data would be copied into \
                 each child flow's spec; use a `copy` step to move Secret data",
            );
        }
        if let Some(s) = &self.selector {
            ctx.label_selector("selector", s);
        }
        for (i, path) in self.watch_fields.iter().enumerate() {
            if path.contains("${") {
                ctx.error(&format!("watchFields[{i}]"), "must be a literal jsonPath");
            } else {
                ctx.json_path(&format!("watchFields[{i}]"), path);
            }
        }
        for (i, r) in self.related.iter().enumerate() {
            r.validate(&mut ctx.at(&format!("related[{i}]")), self.all_namespaces);
        }
        self.status.validate(&mut ctx.at("status"));
        if let Some(retry) = &self.retry {
            if self.record == Some(BindRecord::Child) {
                ctx.error(
                    "retry",
                    "only bind.record: Object retries a failed object; a child flow's steps \
                     are retried by retry steps",
                );
            }
            retry.validate(&mut ctx.at("retry"));
        }
    }
}

/// (group, version) of an apiVersion; the core group is "".
fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// `apiVersion` is GROUP/VERSION or VERSION with a valid group, and `kind` looks like a kind
/// (`example` shows one): the checks a bound kind and a related kind share.
fn check_type(ctx: &mut Ctx, api_version: &str, kind: &str, example: &str) {
    let (group, version) = split_api_version(api_version);
    if version.is_empty() || api_version.matches('/').count() > 1 {
        ctx.error(
            "apiVersion",
            format!("{api_version:?} is not GROUP/VERSION or VERSION"),
        );
    } else if !group.is_empty() && !crate::text::is_dns_subdomain(group) {
        ctx.error("apiVersion", format!("{group:?} is not a valid API group"));
    }
    let kind_ok = kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !kind_ok {
        ctx.error("kind", format!("{kind:?} is not a kind (e.g. {example})"));
    }
}

impl RelatedRef {
    /// A valid apiVersion and kind, never PseudoFlows, and a namespace only for a flow that
    /// serves every namespace: otherwise an object could name something in a namespace the
    /// binding does not serve.
    fn validate(&self, ctx: &mut Ctx, all_namespaces: bool) {
        let (group, _) = self.group_version();
        check_type(ctx, &self.api_version, &self.kind, "Secret");
        let k = &self.kind;
        if group == "ops.example.com" && k == "PseudoFlow" {
            ctx.error("kind", "a related object cannot be a PseudoFlow");
        }
        if self.name.trim().is_empty() {
            ctx.error("name", "is empty");
        }
        if self.namespace.is_some() && !all_namespaces {
            ctx.error(
                "namespace",
                "only a flow with allNamespaces may name another namespace; related objects \
                 are in the object's namespace",
            );
        }
    }
}

impl BindStatus {
    /// Whether anything is written back (not for `phaseField: ""`, `conditions: false` and no
    /// `fields`: then kinds without a status subresource, such as ConfigMaps, can be bound).
    pub fn writes_anything(&self) -> bool {
        !self.phase_field.is_empty() || self.conditions || !self.fields.is_empty()
    }

    /// Field names are plain identifiers and do not collide with the phase or
    /// `conditions`; their values' expressions are checked with the flow's others.
    fn validate(&self, ctx: &mut Ctx) {
        let ident = |s: &str| {
            s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if !self.phase_field.is_empty() && !ident(&self.phase_field) {
            let f = &self.phase_field;
            ctx.error("phaseField", format!("{f:?} is not a status field name"));
        }
        for key in self.fields.keys() {
            let at = format!("fields.{key}");
            if !ident(key) {
                ctx.error(&at, format!("{key:?} is not a status field name"));
            } else if key == &self.phase_field
                || matches!(key.as_str(), "conditions" | "observedGeneration")
            {
                ctx.error(&at, format!("{key:?} is written by the controller already"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostics;
    use serde_json::json;

    fn problems(v: Value) -> Vec<String> {
        let bind: Bind = serde_json::from_value(v).unwrap();
        let mut diags = Diagnostics::default();
        bind.validate(&mut Ctx::new("spec.bind", &mut diags));
        diags
            .errors()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect()
    }

    #[test]
    fn retry_backs_off_doubling_to_its_cap_and_is_validated_at_its_path() {
        let r = BindRetry::default();
        let waits: Vec<u64> = (1..=7).map(|n| r.backoff(n)).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(r.backoff(u32::MAX), 300, "no overflow");
        let base = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "record": "Object"});
        let mut ok = base.clone();
        ok["retry"] = json!({"backoffSeconds": 2});
        assert!(problems(ok.clone()).is_empty(), "{:?}", problems(ok));
        let mut bad = base.clone();
        bad["retry"] = json!({"backoffSeconds": 30, "maxBackoffSeconds": 10});
        assert_eq!(
            problems(bad),
            ["spec.bind.retry.maxBackoffSeconds: 10 is less than backoffSeconds (30)"]
        );
        let mut zero = base.clone();
        zero["retry"] = json!({"backoffSeconds": 0});
        assert!(problems(zero)[0].starts_with("spec.bind.retry.backoffSeconds: 0 is not"));
        let mut child = base;
        child["record"] = json!("Child");
        child["retry"] = json!({});
        assert!(problems(child)[0].starts_with("spec.bind.retry: only bind.record: Object"));
    }

    #[test]
    fn a_plain_binding_is_valid_and_defaults_to_phase_and_conditions() {
        let v = json!({"apiVersion": "example.com/v1", "kind": "Database"});
        assert!(problems(v.clone()).is_empty());
        let bind: Bind = serde_json::from_value(v).unwrap();
        assert_eq!(bind.status.phase_field, "phase");
        assert!(bind.status.conditions && !bind.all_namespaces);
        assert_eq!(bind.group_version(), ("example.com", "v1"));
    }

    #[test]
    fn record_is_left_to_the_compiler_unless_set_and_object_follows_related_objects() {
        let v = json!({"apiVersion": "example.com/v1", "kind": "Gadget"});
        let bind: Bind = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(bind.record, None);
        let mut retried = v.clone();
        retried["retry"] = json!({});
        assert!(problems(retried).is_empty(), "unset may resolve to Object");
        assert!(serde_json::to_value(&bind).unwrap().get("record").is_none());
        let mut object = v.clone();
        object["record"] = json!("Object");
        assert!(problems(object.clone()).is_empty());
        object["related"] = json!([{"apiVersion": "v1", "kind": "Secret", "name": "s"}]);
        let p = problems(object);
        assert!(
            p.is_empty(),
            "record: Object follows related objects: {p:?}"
        );
    }

    #[test]
    fn each_mistake_is_named_at_its_path() {
        let p = problems(json!({
            "apiVersion": "a/b/c", "kind": "database",
            "selector": "a in (", "watchFields": [".spec.x", "spec[", "${x}"],
            "status": {"phaseField": "a b", "fields": {"conditions": "x", "ok": "${y}"}}
        }));
        let paths: Vec<&str> = p.iter().map(|s| s.split(": ").next().unwrap()).collect();
        assert_eq!(
            paths,
            [
                "spec.bind.apiVersion",
                "spec.bind.kind",
                "spec.bind.selector",
                "spec.bind.watchFields[1]",
                "spec.bind.watchFields[2]",
                "spec.bind.status.phaseField",
                "spec.bind.status.fields.conditions"
            ],
            "{p:#?}"
        );
    }

    #[test]
    fn a_related_object_is_in_the_objects_namespace_unless_the_flow_serves_all() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "name": "${object.spec.secretName}"});
        let v = json!({"apiVersion": "example.com/v1", "kind": "SecSynch", "related": [secret]});
        assert!(problems(v).is_empty());
        let mut elsewhere = secret.clone();
        elsewhere["namespace"] = json!("${object.spec.from}");
        let v = json!({"apiVersion": "example.com/v1", "kind": "SecSynch",
            "related": [elsewhere]});
        let p = problems(v);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("spec.bind.related[0].namespace: only a flow with allNamespaces"),
            "{p:?}"
        );
        let v = json!({"apiVersion": "example.com/v1", "kind": "SecSynch",
            "allNamespaces": true, "related": [elsewhere]});
        assert!(problems(v).is_empty());
        let flows = json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "name": "x"});
        let v = json!({"apiVersion": "example.com/v1", "kind": "SecSynch",
            "related": [flows, {"apiVersion": "v1", "kind": "secret", "name": " "}]});
        let paths: Vec<String> = problems(v)
            .iter()
            .map(|s| s.split(": ").next().unwrap().to_string())
            .collect();
        assert_eq!(
            paths,
            [
                "spec.bind.related[0].kind",
                "spec.bind.related[1].kind",
                "spec.bind.related[1].name"
            ]
        );
    }

    #[test]
    fn a_flow_cannot_bind_to_secrets_and_the_error_names_the_path() {
        let p = problems(json!({"apiVersion": "v1", "kind": "Secret"}));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("spec.bind.kind: a flow cannot be bound to Secrets"),
            "{p:?}"
        );
        // A kind named Secret in another group is not the core Secret.
        assert!(problems(json!({"apiVersion": "example.com/v1", "kind": "Secret"})).is_empty());
    }

    #[test]
    fn a_flow_cannot_bind_to_flows_of_any_version_nor_any_kind_of_their_group() {
        for v in ["v1alpha1", "v1beta1", "v2"] {
            for kind in ["PseudoFlow", "Anything"] {
                let p =
                    problems(json!({"apiVersion": format!("ops.example.com/{v}"), "kind": kind}));
                assert_eq!(p.len(), 1, "{v} {kind}: {p:?}");
                assert!(
                    p[0].starts_with(
                        "spec.bind.apiVersion: a flow cannot be bound to the ops.example.com group"
                    ),
                    "{p:?}"
                );
            }
        }
        // The same kind name in another group is someone else's.
        assert!(problems(json!({"apiVersion": "example.com/v1", "kind": "PseudoFlow"})).is_empty());
    }

    #[test]
    fn a_flow_cannot_bind_to_the_jobs_the_controller_makes() {
        for v in ["v1", "v2"] {
            let p = problems(json!({"apiVersion": format!("batch/{v}"), "kind": "Job"}));
            assert_eq!(p.len(), 1, "{p:?}");
            assert!(
                p[0].starts_with("spec.bind.kind: a flow cannot be bound to Jobs"),
                "{p:?}"
            );
        }
        assert!(problems(json!({"apiVersion": "batch/v1", "kind": "CronJob"})).is_empty());
    }
}
