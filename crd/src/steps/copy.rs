//! `copy`: move a Secret's or ConfigMap's data to other namespaces/names without it ever being
//! seen by the flow. The executor reads and writes it under the flow's ServiceAccount; only key
//! names and counts reach its result, so the data never enters variables, status, Events, logs
//! or the run's ConfigMaps (a `exec`/`eval` pair would have to carry it through all of those).

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, Preview, StepParams};
use crate::check::Ctx;
use crate::text::{is_dns_label, is_dns_subdomain};

/// Annotation on every copy naming its source (`namespace/name`): written by the executor,
/// shown by `kubectl pf plan`'s preview of a copy.
pub const COPIED_FROM: &str = "ops.example.com/copied-from";
/// Annotation on every copy naming the flow whose `copy` wrote it (`namespace/name`): what
/// tells a copy of this flow's from an object it must never overwrite or delete.
pub const COPIED_BY: &str = "ops.example.com/copied-by";

/// Most targets one `copy` step writes.
pub const MAX_COPY_TARGETS: usize = 100;

/// Copies the data of `from` (all keys, or those in `keys`, renamed as asked) to every target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyStep {
    /// The object whose data is copied.
    pub from: CopySource,
    /// Where it is written; each target gets the source's name unless named. Each copy is
    /// marked `ops.example.com/copied-by: <flow namespace>/<flow name>`; an object of the same
    /// name without this flow's mark is never overwritten: the step fails naming its owner.
    #[schemars(length(min = 1, max = MAX_COPY_TARGETS))]
    pub to: Vec<CopyTarget>,
    /// Only these keys (default: every key), each optionally renamed with `as`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<CopyKey>,
}

/// What `copy` can move: objects made of named data keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum CopyKind {
    /// A Secret (its `type` is copied too).
    Secret,
    /// A ConfigMap (`data` and `binaryData`).
    ConfigMap,
}

impl CopyKind {
    /// The kind's plural resource name, as RBAC rules name it.
    pub fn plural(self) -> &'static str {
        match self {
            CopyKind::Secret => "secrets",
            CopyKind::ConfigMap => "configmaps",
        }
    }
}

/// The object read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopySource {
    /// `Secret` or `ConfigMap`.
    pub kind: CopyKind,
    /// Its name.
    pub name: String,
    /// Its namespace (default: the flow's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// One object written: same kind as the source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyTarget {
    /// The namespace written to.
    pub namespace: String,
    /// The name written (default: the source's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One key copied, optionally under another name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyKey {
    /// The key in the source.
    pub key: String,
    /// The key in the targets (default: the same).
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    pub r#as: Option<String>,
}

impl CopyKey {
    /// The key's name in the targets.
    pub fn target_key(&self) -> &str {
        self.r#as.as_deref().unwrap_or(&self.key)
    }
}

/// A data key as Secrets and ConfigMaps allow it: `[-._a-zA-Z0-9]+`, at most 253 characters.
pub fn is_data_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
}

/// A field that may still hold `${...}` when validated: checked after substitution instead.
fn templated(s: &str) -> bool {
    s.contains("${")
}

impl StepParams for CopyStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::Preview(Preview::Copy)
    }

    fn runs_in_controller(&self) -> bool {
        true
    }

    fn validate(&self, ctx: &mut Ctx) {
        let name_ok = |s: &str| templated(s) || is_dns_subdomain(s);
        let ns_ok = |s: &str| templated(s) || is_dns_label(s);
        if !name_ok(&self.from.name) {
            ctx.error(
                "from.name",
                format!("{:?} is not a valid name", self.from.name),
            );
        }
        if let Some(ns) = self.from.namespace.as_deref().filter(|ns| !ns_ok(ns)) {
            ctx.error("from.namespace", format!("{ns:?} is not a valid namespace"));
        }
        if self.to.is_empty() {
            ctx.error("to", "give at least one target namespace");
        }
        let mut seen = BTreeSet::new();
        for (i, t) in self.to.iter().enumerate() {
            if !ns_ok(&t.namespace) {
                let msg = format!("{:?} is not a valid namespace", t.namespace);
                ctx.error(&format!("to[{i}].namespace"), msg);
            }
            let name = t.name.as_deref().unwrap_or(&self.from.name);
            if !name_ok(name) {
                ctx.error(
                    &format!("to[{i}].name"),
                    format!("{name:?} is not a valid name"),
                );
            }
            if !seen.insert((t.namespace.as_str(), name)) {
                ctx.error(
                    &format!("to[{i}]"),
                    format!("{}/{name} is written twice", t.namespace),
                );
            }
            if self.from.namespace.as_deref() == Some(t.namespace.as_str())
                && name == self.from.name
            {
                ctx.error(
                    &format!("to[{i}]"),
                    "a target must not be the source itself",
                );
            }
        }
        let mut written = BTreeSet::new();
        for (i, k) in self.keys.iter().enumerate() {
            for (field, key) in [("key", k.key.as_str()), ("as", k.target_key())] {
                if !is_data_key(key) {
                    let msg = format!("{key:?} is not a valid data key ([-._a-zA-Z0-9]+)");
                    ctx.error(&format!("keys[{i}].{field}"), msg);
                }
            }
            if !written.insert(k.target_key()) {
                let msg = format!("key {:?} is written twice", k.target_key());
                ctx.error(&format!("keys[{i}]"), msg);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::Diagnostics;

    fn errors(step: serde_json::Value) -> Vec<String> {
        let step: CopyStep = serde_json::from_value(step).unwrap();
        let mut diags = Diagnostics::default();
        step.validate(&mut Ctx::new("spec.steps[0]", &mut diags));
        diags
            .errors()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect()
    }

    #[test]
    fn a_selection_with_renames_into_two_namespaces_is_valid() {
        let e = errors(serde_json::json!({
            "from": {"kind": "Secret", "name": "db", "namespace": "src"},
            "to": [{"namespace": "a"}, {"namespace": "b", "name": "db-copy"}],
            "keys": [{"key": "password"}, {"key": "user", "as": "username"}]
        }));
        assert!(e.is_empty(), "{e:?}");
    }

    #[test]
    fn bad_targets_and_keys_are_named_by_path() {
        let e = errors(serde_json::json!({
            "from": {"kind": "ConfigMap", "name": "cfg", "namespace": "a"},
            "to": [{"namespace": "a"}, {"namespace": "B_"}, {"namespace": "c"}, {"namespace": "c"}],
            "keys": [{"key": "../x"}, {"key": "y", "as": "z"}, {"key": "z"}]
        }));
        let has = |p: &str| e.iter().any(|m| m.starts_with(p));
        assert!(
            has("spec.steps[0].to[0]: a target must not be the source"),
            "{e:?}"
        );
        assert!(has("spec.steps[0].to[1].namespace"), "{e:?}");
        assert!(has("spec.steps[0].to[3]: c/cfg is written twice"), "{e:?}");
        assert!(has("spec.steps[0].keys[0].key"), "{e:?}");
        assert!(
            has("spec.steps[0].keys[2]: key \"z\" is written twice"),
            "{e:?}"
        );
    }

    #[test]
    fn names_with_variables_are_left_for_after_substitution() {
        let e = errors(serde_json::json!({
            "from": {"kind": "Secret", "name": "${src}"},
            "to": [{"namespace": "${ns}"}]
        }));
        assert!(e.is_empty(), "{e:?}");
    }
}
