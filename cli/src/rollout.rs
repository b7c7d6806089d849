//! `rollout status|pause|resume|promote|undo FLOW`: a bound flow's rollout of its newest revision
//! to its objects (docs/bound-flows.md#rollouts), with the commands `kubectl rollout` users know.
//! `status` prints `status.bound.rollout` and, as `kubectl rollout status`, waits until it is
//! Completed (failing when it Stopped, or on `--timeout`). The others set
//! `ops.example.com/rollout` as `kubectl annotate` would, with the caller's own rights: the
//! admission webhook refuses it unless they may `rollout` pseudoflows there, and records who
//! asked, for which revision (`ops.example.com/rollout-by`); the controller acts only on that.
//! The patch carries the flow's resourceVersion as read and checked, so it fails (409, read and
//! checked again) if the flow changed before it landed.

use std::time::Duration;

use clap::Subcommand;
use futures::StreamExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use pseudoflow_crd::rollout::{RolloutAction, ROLLOUT_ANNOTATION, ROLLOUT_BY_ANNOTATION};
use pseudoflow_crd::status::{RolloutPhase, RolloutStatus};
use serde_json::{json, Value};

use crate::cluster::{flow, flows, status, Kube};
use crate::escape::printable;

/// What `kubectl pf rollout` does.
#[derive(Debug, Subcommand)]
pub enum RolloutVerb {
    /// Show the rollout (revision, phase, wave, objects updated, failures, last action) and wait
    /// until it is Completed; exits 1 if it Stopped or on --timeout.
    Status {
        /// The bound flow's name.
        name: String,
        /// Wait until the rollout is Completed (`-w=false`: print once and exit).
        #[arg(short = 'w', long, num_args = 0..=1, require_equals = true,
              default_value = "true", default_missing_value = "true",
              action = clap::ArgAction::Set)]
        watch: bool,
        /// How long to wait (`30s`, `5m`, `1h30m`; 0: forever).
        #[arg(long, default_value = "0", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Pause the rollout: no further object gets the new revision until resume (runs under way
    /// finish). Needs the `rollout` verb on pseudoflows.
    Pause {
        /// The bound flow's name.
        name: String,
    },
    /// Resume a paused rollout. Needs the `rollout` verb on pseudoflows.
    Resume {
        /// The bound flow's name.
        name: String,
    },
    /// Go to the last wave now, whatever failed. Needs the `rollout` verb on pseudoflows.
    Promote {
        /// The bound flow's name.
        name: String,
    },
    /// Serve every object the new revision reached with the previous revision again, in the
    /// same waves. Needs the `rollout` verb on pseudoflows.
    Undo {
        /// The bound flow's name.
        name: String,
    },
}

/// Runs `verb`.
pub async fn rollout(k: &Kube, verb: RolloutVerb) -> anyhow::Result<()> {
    match verb {
        RolloutVerb::Status {
            name,
            watch,
            timeout,
        } => status_of(k, &name, watch, timeout).await,
        RolloutVerb::Pause { name } => act(k, &name, RolloutAction::Pause).await,
        RolloutVerb::Resume { name } => act(k, &name, RolloutAction::Resume).await,
        RolloutVerb::Promote { name } => act(k, &name, RolloutAction::Promote).await,
        RolloutVerb::Undo { name } => act(k, &name, RolloutAction::Undo).await,
    }
}

/// A duration as kubectl's `--timeout` takes it: `0`, or numbers with `h`, `m`, `s` (`1m30s`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut secs = 0u64;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return Err(format!("{text:?}: a duration is like 30s, 5m or 1h30m")),
        };
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("{text:?}: a number before each unit (30s, 5m, 1h30m)"))?;
        secs = secs.saturating_add(n.saturating_mul(unit));
        digits.clear();
    }
    if !digits.is_empty() || text.is_empty() {
        return Err(format!(
            "{text:?}: a unit after each number (30s, 5m, 1h30m)"
        ));
    }
    Ok(Duration::from_secs(secs))
}

/// The rollout of bound flow `f`, or why it has none.
fn rollout_of(f: &DynamicObject) -> anyhow::Result<RolloutStatus> {
    let name = f.metadata.name.as_deref().unwrap_or_default();
    if f.data.pointer("/spec/bind").is_none_or(Value::is_null) {
        anyhow::bail!("pseudoflow {name:?} is not bound to a kind (spec.bind): it has no rollout");
    }
    status(f).bound.and_then(|b| b.rollout).ok_or_else(|| {
        anyhow::anyhow!(
            "pseudoflow {name:?} has no rollout yet (status.bound.rollout): the controller \
                 has not kept a revision of it"
        )
    })
}

fn phase_name(p: RolloutPhase) -> &'static str {
    match p {
        RolloutPhase::Progressing => "Progressing",
        RolloutPhase::Paused => "Paused",
        RolloutPhase::Stopped => "Stopped",
        RolloutPhase::Completed => "Completed",
    }
}

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
async fn status_of(k: &Kube, name: &str, watch: bool, timeout: Duration) -> anyhow::Result<()> {
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
async fn act(k: &Kube, name: &str, action: RolloutAction) -> anyhow::Result<()> {
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
    use clap::Parser;

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
    fn a_timeout_is_read_as_kubectl_writes_it() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m5s"), Ok(Duration::from_secs(5405)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn status_waits_by_default_and_w_false_does_not() {
        let parse = |args: &[&str]| {
            let cli = crate::Cli::try_parse_from(args).unwrap();
            match cli.verb {
                crate::Verb::Rollout {
                    verb: RolloutVerb::Status { watch, timeout, .. },
                } => (watch, timeout),
                other => panic!("{other:?}"),
            }
        };
        let pf = "kubectl-pf";
        assert_eq!(
            parse(&[pf, "rollout", "status", "f"]),
            (true, Duration::ZERO)
        );
        assert!(!parse(&[pf, "rollout", "status", "f", "-w=false"]).0);
        assert!(!parse(&[pf, "rollout", "status", "f", "--watch=false"]).0);
        assert!(parse(&[pf, "rollout", "status", "-w", "f"]).0);
        let (_, t) = parse(&[pf, "rollout", "status", "f", "--timeout", "2m"]);
        assert_eq!(t, Duration::from_secs(120));
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
