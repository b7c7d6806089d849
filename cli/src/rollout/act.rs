//! `rollout pause|resume|promote|undo`: setting `ops.example.com/rollout` as `kubectl annotate`
//! would, with the caller's own rights, only on the flow as read and checked (its
//! resourceVersion), and saying who the webhook's stamp records; refused here when the action
//! would mean nothing for the rollout as it stands.

use kube::api::{DynamicObject, Patch, PatchParams};
use pseudoflow_crd::rollout::{RolloutAction, ROLLOUT_ANNOTATION, ROLLOUT_BY_ANNOTATION};
use pseudoflow_crd::status::{RolloutPhase, RolloutStatus};
use serde_json::{json, Value};

use super::{phase_name, rollout_of};
use crate::cluster::{flow, flows, Kube};
use crate::escape::printable;

/// Why `action` means nothing for rollout `r` now (None: it may be asked).
fn pointless(action: RolloutAction, r: &RolloutStatus) -> Option<String> {
    let rev = printable(&r.revision);
    match (action, r.phase) {
        (RolloutAction::Pause, RolloutPhase::Paused) => {
            Some(format!("the rollout of revision {rev} is already paused"))
        }
        (RolloutAction::Pause | RolloutAction::Promote, RolloutPhase::Completed) => Some(format!(
            "revision {rev} is rolled out to every object: nothing to {}",
            action.as_str()
        )),
        (RolloutAction::Resume, p) if p != RolloutPhase::Paused => Some(format!(
            "the rollout of revision {rev} is not paused ({})",
            phase_name(p)
        )),
        (RolloutAction::Undo, _) if r.from.is_none() => Some(format!(
            "the rollout of revision {rev} has no previous revision to go back to"
        )),
        _ => None,
    }
}

/// A merge patch setting (or, with null, removing) the rollout annotation, applied only to the
/// flow as it was at `resource_version` (else the API server answers 409 Conflict).
fn annotate(value: Value, resource_version: &str) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {
        "resourceVersion": resource_version,
        "annotations": {ROLLOUT_ANNOTATION: value},
    }}))
}

/// Attempts at a patch when the flow changes in between (the controller writes status).
const ATTEMPTS: usize = 5;

/// Sets the rollout annotation of `name` to `value` for the rollout of `revision`: read the
/// flow, check it still rolls out that revision, patch with that resourceVersion; a flow changed
/// meanwhile (409) is read and checked again. Returns the flow as patched.
async fn patch(
    k: &Kube,
    name: &str,
    revision: &str,
    value: Value,
    action: RolloutAction,
) -> anyhow::Result<DynamicObject> {
    let api = flows(&k.client, Some(&k.namespace));
    for _ in 0..ATTEMPTS {
        let current = flow(k, name).await?;
        let now = rollout_of(&current)?;
        if now.revision != revision {
            anyhow::bail!(
                "pseudoflow {name:?} changed since it was read: it now rolls out revision {}, \
                 not {}; nothing asked; look again (kubectl pf rollout status {name})",
                printable(&now.revision),
                printable(revision)
            );
        }
        let rv = current.metadata.resource_version.unwrap_or_default();
        match api
            .patch(name, &PatchParams::default(), &annotate(value.clone(), &rv))
            .await
        {
            Ok(patched) => return Ok(patched),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    anyhow::bail!(
        "pseudoflow {name:?} kept changing while {} was being asked: nothing asked; try again",
        action.as_str()
    )
}

/// The webhook's stamp on `f`, as written (unverified: the controller checks it).
fn stamp_of(f: &DynamicObject) -> Option<&String> {
    f.metadata.annotations.as_ref()?.get(ROLLOUT_BY_ANNOTATION)
}

/// Who the stamp `after` says asked for `action`, if the webhook wrote it for this request:
/// another value than the stamp `before` it, naming that action.
fn stamped_by(
    before: Option<&String>,
    after: Option<&String>,
    action: RolloutAction,
) -> Option<String> {
    let after = after.filter(|a| Some(*a) != before)?;
    let stamp: Value = serde_json::from_str(after).ok()?;
    if stamp["action"] != action.as_str() {
        return None;
    }
    stamp["user"].as_str().map(str::to_string)
}

/// `rollout pause|resume|promote|undo NAME`.
pub(super) async fn act(k: &Kube, name: &str, action: RolloutAction) -> anyhow::Result<()> {
    let current = flow(k, name).await?;
    let r = rollout_of(&current)?;
    if let Some(why) = pointless(action, &r) {
        anyhow::bail!("{why}; nothing asked");
    }
    let already = current
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ROLLOUT_ANNOTATION))
        .is_some_and(|v| v == action.as_str());
    if already {
        // Left from an earlier request: an unchanged annotation is no new request, so it is
        // removed and set again.
        patch(k, name, &r.revision, Value::Null, action).await?;
    }
    let before = stamp_of(&current).cloned();
    let patched = patch(k, name, &r.revision, json!(action.as_str()), action).await?;
    let rev = printable(&r.revision);
    match stamped_by(before.as_ref(), stamp_of(&patched), action) {
        Some(user) => outln!(
            "pseudoflow.ops.example.com/{name} rollout of revision {rev}: {} asked by {}",
            action.as_str(),
            printable(&user)
        ),
        None => {
            outln!(
                "pseudoflow.ops.example.com/{name} rollout of revision {rev}: {} asked",
                action.as_str()
            );
            eprintln!(
                "warning: no {ROLLOUT_BY_ANNOTATION} stamp was written (is the admission \
                 webhook enabled?): the controller acts on no unstamped request"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout(v: Value) -> RolloutStatus {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_a_new_stamp_for_the_action_asked_names_who_asked() {
        let pause = r#"{"action":"pause","revision":"w-2","user":"alice","time":1,"mac":"m"}"#;
        let older = r#"{"action":"pause","revision":"w-2","user":"bob","time":0,"mac":"n"}"#;
        let (new, old) = (pause.to_string(), older.to_string());
        let p = RolloutAction::Pause;
        assert_eq!(
            stamped_by(Some(&old), Some(&new), p).as_deref(),
            Some("alice")
        );
        assert_eq!(stamped_by(None, Some(&new), p).as_deref(), Some("alice"));
        assert_eq!(
            stamped_by(Some(&new), Some(&new), p),
            None,
            "left from before"
        );
        assert_eq!(stamped_by(None, Some(&new), RolloutAction::Undo), None);
        assert_eq!(stamped_by(Some(&old), None, p), None);
    }

    #[test]
    fn actions_that_mean_nothing_now_are_refused() {
        let at = |phase: &str, from: Option<&str>| {
            rollout(
                json!({"revision": "w-2", "from": from, "phase": phase, "wave": 1,
                "waves": 2, "target": 1, "updated": 0}),
            )
        };
        let p = |a, phase, from| pointless(a, &at(phase, from));
        assert!(p(RolloutAction::Pause, "Progressing", None).is_none());
        assert!(p(RolloutAction::Pause, "Paused", None).is_some());
        assert!(p(RolloutAction::Pause, "Completed", None).is_some());
        assert!(p(RolloutAction::Resume, "Paused", None).is_none());
        assert!(p(RolloutAction::Resume, "Progressing", None).is_some());
        assert!(p(RolloutAction::Promote, "Stopped", None).is_none());
        assert!(p(RolloutAction::Promote, "Completed", None).is_some());
        assert!(p(RolloutAction::Undo, "Completed", Some("w-1")).is_none());
        assert!(p(RolloutAction::Undo, "Progressing", None).is_some());
    }
}
