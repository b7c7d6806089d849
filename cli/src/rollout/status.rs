//! `rollout status`: how a bound flow's rollout is shown (every line from status made printable)
//! and waited for, as `kubectl rollout status` does a Deployment's: until it is Completed,
//! failing when it Stopped, and never settling on a status the controller wrote for an older
//! generation of the flow.

use std::time::Duration;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::{watcher, WatchStreamExt};
use pseudoflow_crd::status::{RolloutPhase, RolloutStatus};
use serde_json::Value;

use super::{phase_name, rollout_of};
use crate::cluster::{flow, flows, status, Kube};
use crate::escape::printable;

/// The rollout as `status` prints it: a line per field that has something to say. Every text
/// comes from status (names and a message others wrote), so none reaches the terminal raw.
pub fn describe(name: &str, r: &RolloutStatus) -> String {
    let mut out = format!(
        "pseudoflow.ops.example.com/{name} rollout of revision {}",
        printable(&r.revision)
    );
    if let Some(from) = &r.from {
        out.push_str(&format!(" (from {})", printable(from)));
    }
    out.push('\n');
    let mut line = |label: &str, value: String| {
        out.push_str(&format!("  {label:<13}{value}\n"));
    };
    line("phase:", phase_name(r.phase).to_string());
    line("wave:", format!("{}/{}", r.wave, r.waves));
    line("updated:", format!("{}/{} objects", r.updated, r.target));
    if !r.failed_objects.is_empty() {
        let failed: Vec<String> = r.failed_objects.iter().map(|o| printable(o)).collect();
        line("failed:", failed.join(", "));
    }
    if let Some(m) = &r.message {
        line("message:", printable(m));
    }
    if let Some(u) = &r.undone {
        line("undone:", printable(u));
    }
    if let Some(a) = &r.last_action {
        let time = serde_json::to_value(&a.time)
            .ok()
            .and_then(|t| t.as_str().map(str::to_string))
            .unwrap_or_default();
        line(
            "last action:",
            format!("{} by {} at {time}", a.action.as_str(), printable(&a.user)),
        );
    }
    out
}

/// One line of progress, printed while waiting.
fn progress(r: &RolloutStatus) -> String {
    let mut line = format!(
        "wave {}/{}: {} of {} objects updated ({})",
        r.wave,
        r.waves,
        r.updated,
        r.target,
        phase_name(r.phase)
    );
    if let Some(m) = &r.message {
        line.push_str(&format!(": {}", printable(m)));
    }
    line
}

/// What waiting on `r` comes to: Some(Ok) done, Some(Err) failed, None keep waiting.
fn settled(name: &str, r: &RolloutStatus) -> Option<anyhow::Result<()>> {
    match r.phase {
        RolloutPhase::Completed => Some(Ok(())),
        RolloutPhase::Stopped => {
            let mut why = format!(
                "the rollout of revision {} of pseudoflow {name:?} stopped",
                printable(&r.revision)
            );
            if let Some(m) = &r.message {
                why.push_str(&format!(": {}", printable(m)));
            }
            if !r.failed_objects.is_empty() {
                let failed: Vec<String> = r.failed_objects.iter().map(|o| printable(o)).collect();
                why.push_str(&format!(" (failed: {})", failed.join(", ")));
            }
            why.push_str(&format!(
                "; kubectl pf rollout promote|undo {name} to go on or back"
            ));
            Some(Err(anyhow::anyhow!(why)))
        }
        RolloutPhase::Progressing | RolloutPhase::Paused => None,
    }
}

/// What a waiter sees of a bound flow's rollout.
enum Seen {
    /// The controller has not yet observed the flow's newest generation (this one): its status
    /// may show an older rollout, or none yet, so nothing is settled.
    Unobserved(i64),
    /// The rollout, as of the newest generation.
    Rollout(RolloutStatus),
}

/// The generation of `f` its status has not observed yet, if any.
fn unobserved(f: &DynamicObject) -> Option<i64> {
    let generation = f.metadata.generation?;
    let observed = status(f).observed_generation;
    observed
        .is_none_or(|o| o < generation)
        .then_some(generation)
}

/// What a waiter sees of `f`, or why it has no rollout to wait for.
fn seen(f: &DynamicObject) -> anyhow::Result<Seen> {
    match (rollout_of(f), unobserved(f)) {
        (Err(e), _) if f.data.pointer("/spec/bind").is_none_or(Value::is_null) => Err(e),
        (_, Some(generation)) => Ok(Seen::Unobserved(generation)),
        (rollout, None) => rollout.map(Seen::Rollout),
    }
}

/// The line a waiter prints for `seen`.
fn seen_line(seen: &Seen) -> String {
    match seen {
        Seen::Unobserved(g) => format!("waiting for the controller to observe generation {g}"),
        Seen::Rollout(r) => progress(r),
    }
}

/// `rollout status NAME [-w=false] [--timeout D]`.
pub(super) async fn status_of(
    k: &Kube,
    name: &str,
    watch: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    let f = flow(k, name).await?;
    let now = seen(&f)?;
    match &now {
        Seen::Rollout(r) => {
            out!("{}", describe(name, r));
            if let Some(done) = settled(name, r) {
                return done;
            }
        }
        Seen::Unobserved(_) => {
            if let Ok(r) = rollout_of(&f) {
                out!("{}", describe(name, &r));
            }
            outln!("{}", seen_line(&now));
        }
    }
    if !watch {
        return Ok(());
    }
    let waiting = wait(k, name, seen_line(&now));
    if timeout.is_zero() {
        return waiting.await;
    }
    match tokio::time::timeout(timeout, waiting).await {
        Ok(done) => done,
        Err(_) => {
            let now = seen(&flow(k, name).await?)?;
            anyhow::bail!(
                "timed out after {}s waiting for the rollout of pseudoflow {name:?}: {}",
                timeout.as_secs(),
                seen_line(&now)
            )
        }
    }
}

/// Waits on every change of the flow until its rollout settles, printing each new progress line
/// (`last` is the one already shown).
async fn wait(k: &Kube, name: &str, mut last: String) -> anyhow::Result<()> {
    let mut events = std::pin::pin!(watcher(
        flows(&k.client, Some(&k.namespace)),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .applied_objects());
    while let Some(event) = events.next().await {
        let Ok(f) = event else { continue };
        let now = seen(&f)?;
        let line = seen_line(&now);
        if line != last {
            outln!("{line}");
            last = line;
        }
        let Seen::Rollout(r) = now else { continue };
        if let Some(done) = settled(name, &r) {
            if done.is_ok() {
                outln!(
                    "pseudoflow.ops.example.com/{name}: revision {} rolled out",
                    printable(&r.revision)
                );
            }
            return done;
        }
    }
    anyhow::bail!("the watch of pseudoflow {name:?} ended")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rollout(v: Value) -> RolloutStatus {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn describe_names_revision_wave_objects_failures_and_who_acted() {
        let r = rollout(json!({"revision": "w-2", "from": "w-1", "phase": "Stopped",
            "wave": 2, "waves": 3, "target": 4, "updated": 3,
            "failedObjects": ["team/a", "team/\u{1b}]0;x"],
            "message": "2 objects failed", "lastAction": {"action": "pause", "user": "alice",
            "time": "2026-12-07T15:20:00Z"}}));
        let text = describe("widgets", &r);
        assert!(
            text.starts_with(
                "pseudoflow.ops.example.com/widgets rollout of revision w-2 (from w-1)\n"
            ),
            "{text}"
        );
        for want in [
            "phase:       Stopped",
            "wave:        2/3",
            "updated:     3/4 objects",
            "failed:      team/a, team/\\u{1b}]0;x",
            "message:     2 objects failed",
            "last action: pause by alice at 2026-12-07T15:20:00Z",
        ] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
        let err = settled("widgets", &r).unwrap().unwrap_err().to_string();
        assert!(
            err.contains("stopped: 2 objects failed (failed: team/a,"),
            "{err}"
        );
    }

    #[test]
    fn a_generation_the_controller_has_not_observed_is_waited_for_even_with_a_rollout_shown() {
        let flow = |generation: i64, observed: Option<i64>, rollout: Option<Value>| {
            let mut status = json!({"bound": {"objects": 1, "creating": 0, "running": 1,
                "failed": 0, "rollout": rollout}});
            if let Some(o) = observed {
                status["observedGeneration"] = json!(o);
            }
            serde_json::from_value::<DynamicObject>(json!({
                "apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
                "metadata": {"name": "w", "generation": generation},
                "spec": {"bind": {"apiVersion": "example.com/v1", "kind": "Widget"}},
                "status": status}))
            .unwrap()
        };
        let done = json!({"revision": "w-1", "phase": "Completed", "wave": 1, "waves": 1,
            "target": 1, "updated": 1});
        assert!(matches!(
            seen(&flow(2, Some(1), Some(done.clone()))),
            Ok(Seen::Unobserved(2))
        ));
        assert!(matches!(
            seen(&flow(1, None, None)),
            Ok(Seen::Unobserved(1))
        ));
        assert!(matches!(
            seen(&flow(2, Some(2), Some(done))),
            Ok(Seen::Rollout(_))
        ));
        assert!(
            seen(&flow(2, Some(2), None)).is_err(),
            "observed, and no rollout"
        );
        let mut plain = flow(1, None, None);
        plain.data["spec"] = json!({"steps": []});
        assert!(seen(&plain).is_err(), "not bound");
        assert_eq!(
            seen_line(&Seen::Unobserved(2)),
            "waiting for the controller to observe generation 2"
        );
    }

    #[test]
    fn only_a_completed_rollout_ends_the_wait_well() {
        let at = |phase: &str| {
            rollout(
                json!({"revision": "w-2", "phase": phase, "wave": 1, "waves": 1,
                "target": 1, "updated": 1}),
            )
        };
        assert!(matches!(settled("f", &at("Completed")), Some(Ok(()))));
        assert!(matches!(settled("f", &at("Stopped")), Some(Err(_))));
        assert!(settled("f", &at("Progressing")).is_none());
        assert!(settled("f", &at("Paused")).is_none());
    }
}
