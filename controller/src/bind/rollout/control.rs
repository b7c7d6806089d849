//! Which `kubectl pf rollout` action a bound flow's annotations carry, accepted only with the
//! mutating webhook's stamp (`ops.example.com/rollout-by`, [`crate::rollout_by`]) for this flow,
//! for the revision rolling out, and for the action the annotation names now — as approvals are
//! ([`crate::approval::verdict`]). So a client cannot write who asked, a stamp copied from
//! another flow fails its HMAC, an `undo` asked of one rollout never acts on the next (its
//! stamp names the revision the request found rolling out), and an annotation changed after it
//! was stamped (by someone bypassing the webhook) asks for nothing.

use std::collections::BTreeMap;

use pseudoflow_crd::rollout::{RolloutAction, ROLLOUT_ANNOTATION, ROLLOUT_BY_ANNOTATION};

use crate::approval::Key;
use crate::rollout_by::RolloutStamp;

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

/// What a bound flow's annotations ask of the rollout of one revision.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    /// No `ops.example.com/rollout` annotation.
    Nothing,
    /// An action that is not accepted, with why (for the rollout's message).
    Ignored(String),
    /// An action to act on.
    Accepted(Accepted),
}

/// What flow `namespace/name`'s `annotations` ask of its rollout of `revision` (its
/// ControllerRevision's name): the action, accepted only if its stamp is valid under `key` for
/// that flow, that revision and that action; otherwise why it is ignored.
pub fn asked(
    key: Option<&Key>,
    (namespace, name): (&str, &str),
    annotations: &BTreeMap<String, String>,
    revision: &str,
) -> Asked {
    let Some(value) = annotations.get(ROLLOUT_ANNOTATION) else {
        return Asked::Nothing;
    };
    let ignored =
        |why: &str| Asked::Ignored(format!("{ROLLOUT_ANNOTATION}={value} not accepted: {why}"));
    let Some(action) = RolloutAction::parse(value) else {
        return ignored("it names no action (pause, resume, promote or undo)");
    };
    let Some(key) = key else {
        return ignored("the controller has no approval key");
    };
    let Some(stamp) = annotations.get(ROLLOUT_BY_ANNOTATION) else {
        return ignored(&format!(
            "no {ROLLOUT_BY_ANNOTATION} stamp (the admission webhook writes it; is it enabled?)"
        ));
    };
    let Some(stamp) = RolloutStamp::verify(key, namespace, name, stamp) else {
        return ignored(&format!(
            "the {ROLLOUT_BY_ANNOTATION} stamp is not signed by the admission webhook for this flow"
        ));
    };
    if stamp.action != action {
        return ignored(&format!(
            "the {ROLLOUT_BY_ANNOTATION} stamp records {}",
            stamp.action.as_str()
        ));
    }
    if revision.is_empty() || stamp.revision != revision {
        return ignored(&format!(
            "it was asked of the rollout of revision {:?}, not of {revision:?}; ask again \
             (kubectl pf rollout {} {name})",
            stamp.revision,
            action.as_str()
        ));
    }
    Asked::Accepted(Accepted {
        action,
        user: stamp.user,
        time_ms: stamp.time,
    })
}

/// The action on flow `namespace/name`'s rollout of `revision` (its ControllerRevision's name)
/// that `annotations` carry, if its stamp is valid under `key` for that flow and revision.
pub fn accepted(
    key: Option<&Key>,
    flow: (&str, &str),
    annotations: &BTreeMap<String, String>,
    revision: &str,
) -> Option<Accepted> {
    match asked(key, flow, annotations, revision) {
        Asked::Accepted(a) => Some(a),
        Asked::Nothing | Asked::Ignored(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(action: RolloutAction, revision: &str) -> RolloutStamp {
        RolloutStamp {
            action,
            revision: revision.into(),
            user: "boss".into(),
            groups: vec!["ops".into()],
            time: 100,
        }
    }

    fn ann(action: &str, stamp: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (ROLLOUT_ANNOTATION.to_string(), action.to_string()),
            (ROLLOUT_BY_ANNOTATION.to_string(), stamp.to_string()),
        ])
    }

    const FLOW: (&str, &str) = ("team", "widgets");

    #[test]
    fn a_stamped_action_for_this_flow_and_revision_is_accepted() {
        let key = Key::random();
        let s = stamp(RolloutAction::Promote, "widgets-2").sign(&key, "team", "widgets");
        assert_eq!(
            accepted(Some(&key), FLOW, &ann("promote", &s), "widgets-2"),
            Some(Accepted {
                action: RolloutAction::Promote,
                user: "boss".into(),
                time_ms: 100,
            })
        );
    }

    #[test]
    fn a_forged_stamp_is_not_accepted() {
        let key = Key::random();
        let none = BTreeMap::from([(ROLLOUT_ANNOTATION.to_string(), "pause".to_string())]);
        assert!(accepted(Some(&key), FLOW, &none, "widgets-2").is_none());
        let other_key =
            stamp(RolloutAction::Pause, "widgets-2").sign(&Key::random(), "team", "widgets");
        assert!(accepted(Some(&key), FLOW, &ann("pause", &other_key), "widgets-2").is_none());
        let altered = stamp(RolloutAction::Pause, "widgets-2")
            .sign(&key, "team", "widgets")
            .replace("\"boss\"", "\"mallory\"");
        assert!(accepted(Some(&key), FLOW, &ann("pause", &altered), "widgets-2").is_none());
        // A stop stamp signed with the same key is not a rollout stamp.
        let stop = crate::stopped_by::StopStamp {
            run: "widgets-2".into(),
            user: "boss".into(),
            groups: vec![],
            time: 1,
        }
        .sign(&key, "team", "widgets");
        assert!(accepted(Some(&key), FLOW, &ann("pause", &stop), "widgets-2").is_none());
        // Without a key nothing is accepted, and the reason says so.
        let s = stamp(RolloutAction::Pause, "widgets-2").sign(&key, "team", "widgets");
        assert!(matches!(
            asked(None, FLOW, &ann("pause", &s), "widgets-2"),
            Asked::Ignored(why) if why.contains("no approval key")
        ));
    }

    #[test]
    fn a_stamp_for_another_revision_is_not_replayed_on_this_one() {
        let key = Key::random();
        let undo = stamp(RolloutAction::Undo, "widgets-2").sign(&key, "team", "widgets");
        assert!(accepted(Some(&key), FLOW, &ann("undo", &undo), "widgets-3").is_none());
        assert!(matches!(
            asked(Some(&key), FLOW, &ann("undo", &undo), "widgets-3"),
            Asked::Ignored(why) if why.contains("\"widgets-2\", not of \"widgets-3\"")
        ));
        // Stamped while no rollout was shown: for no revision.
        let early = stamp(RolloutAction::Undo, "").sign(&key, "team", "widgets");
        assert!(accepted(Some(&key), FLOW, &ann("undo", &early), "").is_none());
    }

    #[test]
    fn a_stamp_for_another_flow_is_not_accepted() {
        let key = Key::random();
        let copied = stamp(RolloutAction::Promote, "widgets-2").sign(&key, "team", "gadgets");
        assert!(accepted(Some(&key), FLOW, &ann("promote", &copied), "widgets-2").is_none());
        let other_ns = stamp(RolloutAction::Promote, "widgets-2").sign(&key, "other", "widgets");
        assert!(accepted(Some(&key), FLOW, &ann("promote", &other_ns), "widgets-2").is_none());
    }

    #[test]
    fn an_annotation_changed_after_stamping_asks_for_nothing() {
        let key = Key::random();
        let pause = stamp(RolloutAction::Pause, "widgets-2").sign(&key, "team", "widgets");
        assert!(accepted(Some(&key), FLOW, &ann("undo", &pause), "widgets-2").is_none());
        assert!(matches!(
            asked(Some(&key), FLOW, &ann("undo", &pause), "widgets-2"),
            Asked::Ignored(why) if why.contains("records pause")
        ));
        assert!(matches!(
            asked(Some(&key), FLOW, &ann("later", &pause), "widgets-2"),
            Asked::Ignored(why) if why.contains("names no action")
        ));
        // Withdrawn: the stamp stays, the annotation is gone.
        let withdrawn = BTreeMap::from([(ROLLOUT_BY_ANNOTATION.to_string(), pause)]);
        assert_eq!(
            asked(Some(&key), FLOW, &withdrawn, "widgets-2"),
            Asked::Nothing
        );
    }
}
