//! Which `kubectl pf rollout` action a bound flow's annotations carry, accepted only with the
//! mutating webhook's stamp (`ops.example.com/rollout-by`) for the revision rolling out, as
//! approvals are (crate::approval). PLACEHOLDER until helper `control` lands: accepts nothing.

use std::collections::BTreeMap;

use pseudoflow_crd::rollout::RolloutAction;

use crate::approval::Key;

/// An action a person asked for, as the webhook recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// What was asked.
    pub action: RolloutAction,
    /// The user the API server authenticated.
    pub user: String,
    /// When the webhook admitted it (unix milliseconds, the webhook's clock: shown, never compared).
    pub time_ms: i64,
}

/// The action on flow `namespace/name`'s rollout of `revision` (its ControllerRevision's name)
/// that `annotations` carry, if its stamp is valid under `key` for that flow and revision.
pub fn accepted(
    key: Option<&Key>,
    (namespace, name): (&str, &str),
    annotations: &BTreeMap<String, String>,
    revision: &str,
) -> Option<Accepted> {
    let _ = (key, namespace, name, annotations, revision);
    None
}
