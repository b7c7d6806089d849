//! `spec.rollout`: how the revisions of a flow bound to a kind are kept (docs/bound-flows.md#revisions).
//! Each change of what decides how its objects are served makes an immutable revision, an
//! `apps/v1` ControllerRevision owned by the flow, as a DaemonSet's or a StatefulSet's; this
//! says how many old ones stay, and how a new revision reaches the objects: in waves
//! (`waves`), stopping when objects of the new revision fail (`maxFailures`), with pause,
//! resume, promote and undo asked for by a stamped annotation (docs/bound-flows.md#rollouts).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
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

/// Annotation asking the controller to act on a bound flow's rollout: `pause`, `resume`,
/// `promote` or `undo` (what `kubectl pf rollout` sets). Accepted only with the webhook's
/// [`ROLLOUT_BY_ANNOTATION`] stamp for the revision rolling out, as approvals are.
pub const ROLLOUT_ANNOTATION: &str = "ops.example.com/rollout";
/// Annotation the mutating webhook writes beside [`ROLLOUT_ANNOTATION`]: the action, the
/// revision it is for (`status.bound.rollout.revision` as the request found it), the user and
/// groups the API server authenticated, the time, and an HMAC (never written by a client).
pub const ROLLOUT_BY_ANNOTATION: &str = "ops.example.com/rollout-by";
/// Most waves a rollout may have.
pub const MAX_WAVES: usize = 20;

/// What a person may ask of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RolloutAction {
    /// No further object gets the new revision until `resume` (runs under way finish).
    Pause,
    /// Go on after a `pause`.
    Resume,
    /// Go to the last wave now, whatever failed.
    Promote,
    /// Serve every object the new revision reached with the previous revision again, in the
    /// same waves; the flow's spec keeps naming the new one until it changes.
    Undo,
}

impl RolloutAction {
    /// The annotation value naming it.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutAction::Pause => "pause",
            RolloutAction::Resume => "resume",
            RolloutAction::Promote => "promote",
            RolloutAction::Undo => "undo",
        }
    }

    /// The action an annotation value names.
    pub fn parse(value: &str) -> Option<Self> {
        [Self::Pause, Self::Resume, Self::Promote, Self::Undo]
            .into_iter()
            .find(|a| a.as_str() == value)
    }
}

/// How a bound flow's revisions are kept and rolled out to its objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// Old revisions kept besides the current one and those still serving an object (the
    /// oldest go first); default 10, as a DaemonSet's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_REVISION_HISTORY_LIMIT))]
    pub revision_history_limit: Option<u32>,
    /// How many objects a new revision has reached at the end of each wave: a count (`1`) or a
    /// percentage of the objects served (`"10%"`, rounded up), each more than the one before; a
    /// last wave of every object is implied. None (the default): every object at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_WAVES))]
    pub waves: Vec<IntOrString>,
    /// Objects of the new revision whose latest run failed that stop the rollout (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_failures: Option<u32>,
    /// Seconds each object of a wave must stay served without failure before the next wave
    /// starts (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 86400))]
    pub min_ready_seconds: Option<u32>,
}

impl Rollout {
    /// Old revisions kept.
    pub fn history_limit(&self) -> u32 {
        self.revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)
    }

    /// Failed objects of the new revision that stop the rollout.
    pub fn failures_allowed(&self) -> u32 {
        self.max_failures.unwrap_or(1).max(1)
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
        if self.waves.len() > MAX_WAVES {
            ctx.error("waves", format!("at most {MAX_WAVES} waves"));
        }
        let (mut count, mut percent) = (0u32, 0u32);
        for (i, w) in self.waves.iter().enumerate() {
            let path = format!("waves[{i}]");
            match Wave::parse(w) {
                Err(why) => ctx.error(&path, why),
                Ok(Wave::Count(n)) if n <= count => ctx.error(
                    &path,
                    format!("each count must be more than the one before ({count})"),
                ),
                Ok(Wave::Percent(p)) if p <= percent => ctx.error(
                    &path,
                    format!("each percentage must be more than the one before ({percent}%)"),
                ),
                Ok(Wave::Count(n)) => count = n,
                Ok(Wave::Percent(p)) => percent = p,
            }
        }
    }
}

/// One wave: how many objects the new revision has reached at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wave {
    /// This many objects (at least 1).
    Count(u32),
    /// This percentage of the objects served, rounded up (1 to 100).
    Percent(u32),
}

impl Wave {
    /// The wave `w` says, or why it says none.
    pub fn parse(w: &IntOrString) -> Result<Wave, String> {
        match w {
            IntOrString::Int(n) if *n >= 1 => Ok(Wave::Count(*n as u32)),
            IntOrString::Int(n) => Err(format!("a count of objects is at least 1, not {n}")),
            IntOrString::String(s) => s
                .strip_suffix('%')
                .and_then(|p| p.parse::<u32>().ok())
                .filter(|p| (1..=100).contains(p))
                .map(Wave::Percent)
                .ok_or_else(|| {
                    format!("{s:?} is neither a count nor a percentage \"1%\" to \"100%\"")
                }),
        }
    }

    /// Objects it reaches out of `objects` served (at most all of them).
    pub fn reach(self, objects: u32) -> u32 {
        match self {
            Wave::Count(n) => n.min(objects),
            Wave::Percent(p) => (u64::from(objects) * u64::from(p)).div_ceil(100) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wave_is_a_positive_count_or_a_percentage_rounded_up() {
        let w = |v: serde_json::Value| Wave::parse(&serde_json::from_value(v).unwrap());
        assert_eq!(w(serde_json::json!(1)), Ok(Wave::Count(1)));
        assert_eq!(w(serde_json::json!("10%")), Ok(Wave::Percent(10)));
        assert!(w(serde_json::json!(0)).is_err());
        assert!(w(serde_json::json!("0%")).is_err());
        assert!(w(serde_json::json!("101%")).is_err());
        assert!(w(serde_json::json!("ten")).is_err());
        assert_eq!(Wave::Percent(10).reach(20), 2);
        assert_eq!(Wave::Percent(10).reach(21), 3);
        assert_eq!(Wave::Count(5).reach(3), 3);
    }

    #[test]
    fn an_action_is_named_by_its_annotation_value() {
        for a in [
            RolloutAction::Pause,
            RolloutAction::Resume,
            RolloutAction::Promote,
            RolloutAction::Undo,
        ] {
            assert_eq!(RolloutAction::parse(a.as_str()), Some(a));
        }
        assert_eq!(RolloutAction::parse("Pause"), None);
    }
}
