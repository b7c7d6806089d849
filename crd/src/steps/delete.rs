//! `delete`: remove one object; deleting an object that is already gone succeeds (idempotent).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, Preview, StepParams};
use crate::check::Ctx;
use crate::common::ObjectRef;

/// Deletes `target` and waits until it is gone (by default with all it owns).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteStep {
    /// The object to delete; `apiVersion` may be left out for well-known kinds.
    pub target: ObjectRef,
    /// Delete it only if it is a copy this flow's `copy` made (its `ops.example.com/copied-by`
    /// names this flow); anything else is left where it is, and the step says whose it is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub only_copies: bool,
    /// What happens to the objects `target` owns (the API's `propagationPolicy`).
    /// `Foreground` (the default): the step ends once they are gone too, so nothing of the old
    /// object is left when the next step runs (a DaemonSet's pods no longer hold their port).
    /// `Background`: the step ends once `target` itself is gone and the garbage collector
    /// deletes what it owns afterwards, as `kubectl delete` and a plain API delete do (faster:
    /// no round through the garbage collector, whose requests are rate-limited, for an object
    /// that owns nothing, such as a pod). `Orphan`: what it owns stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagation: Option<Propagation>,
}

/// See [`DeleteStep::propagation`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::enum_schema::plain_enum)]
pub enum Propagation {
    /// What `target` owns goes first; the step waits for all of it.
    #[default]
    Foreground,
    /// `target` goes now; the garbage collector deletes what it owns afterwards.
    Background,
    /// What `target` owns stays.
    Orphan,
}

impl StepParams for DeleteStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::Preview(Preview::Delete)
    }

    fn runs_in_controller(&self) -> bool {
        true
    }

    fn validate(&self, ctx: &mut Ctx) {
        self.target.validate(&mut ctx.at("target"));
    }
}
