//! A step: the fields every step type shares (`type`, `name`, `continueOnError`,
//! `timeoutSeconds`, `isolate`) plus its type-specific parameters ([`StepKind`]).

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

pub use crate::steps::registry::StepKind;

/// One step of a flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Shown in status and Events instead of the step's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Record a failure of this step and go on with the next one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continue_on_error: bool,
    /// Fail the step after this long. On a structural step (loop, loopNodes, parallel, retry,
    /// includeFlow) it bounds the whole body, every attempt of a retry included: what still
    /// runs inside is stopped. Not allowed on onError, which has no work of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// Run this step in an executor Job of its own instead of sharing one with the steps next
    /// to it (step fusion, docs/decisions.md): for a step whose pod must not be reused, e.g.
    /// one that should be retried or inspected on its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub isolate: bool,
    /// `type` and the fields that belong to it.
    #[serde(flatten)]
    pub kind: StepKind,
}

impl Step {
    /// For `includeFlow`: the flow to include, which the original DSL puts in `name`.
    pub fn included_flow(&self) -> Option<&str> {
        match self.kind {
            StepKind::IncludeFlow(_) => self.name.as_deref(),
            _ => None,
        }
    }
}

impl JsonSchema for Step {
    fn schema_name() -> Cow<'static, str> {
        "Step".into()
    }

    fn inline_schema() -> bool {
        true
    }

    /// The CRD's view of a step: every step type's fields merged, with CEL rules for the
    /// per-type required fields (see [`crate::step_schema::union_step_schema`]).
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        crate::step_schema::union_step_schema()
    }
}
