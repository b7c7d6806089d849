//! `spec.rollout`: how the revisions of a flow bound to a kind are kept (docs/bound-flows.md#revisions).
//! Each change of what decides how its objects are served makes an immutable revision, an
//! `apps/v1` ControllerRevision owned by the flow, as a DaemonSet's or a StatefulSet's; this
//! says how many old ones stay. (Waves, pause and undo, issue #44, will be set here too.)

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::check::Ctx;

/// Old revisions kept by default, as a DaemonSet's `revisionHistoryLimit`.
pub const DEFAULT_REVISION_HISTORY_LIMIT: u32 = 10;
/// Most old revisions a flow may keep.
pub const MAX_REVISION_HISTORY_LIMIT: u32 = 100;
/// Annotation on a child flow (`record: Child`): the hash of the revision its spec was made
/// from, so of the revision that serves its object (`kubectl pf get` shows it).
pub const REVISION_ANNOTATION: &str = "ops.example.com/revision";
/// Label on each of a bound flow's ControllerRevisions, naming the flow.
pub const REVISION_OF_LABEL: &str = "ops.example.com/revision-of";
/// Label on each ControllerRevision: the hash of its data (what DaemonSets call it).
pub const REVISION_HASH_LABEL: &str = "controller-revision-hash";

/// How a bound flow's revisions are kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// Old revisions kept besides the current one and those still serving an object (the
    /// oldest go first); default 10, as a DaemonSet's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_REVISION_HISTORY_LIMIT))]
    pub revision_history_limit: Option<u32>,
}

impl Rollout {
    /// Old revisions kept.
    pub fn history_limit(&self) -> u32 {
        self.revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)
    }

    pub(crate) fn validate(&self, ctx: &mut Ctx) {
        if let Some(n) = self.revision_history_limit {
            if n > MAX_REVISION_HISTORY_LIMIT {
                ctx.error(
                    "revisionHistoryLimit",
                    format!("at most {MAX_REVISION_HISTORY_LIMIT}"),
                );
            }
        }
    }
}
