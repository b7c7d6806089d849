//! `rollout status|pause|resume|promote|undo FLOW`: a bound flow's rollout of its newest revision
//! to its objects (docs/bound-flows.md#rollouts), with the commands `kubectl rollout` users know.
//! `status` prints `status.bound.rollout` and, as `kubectl rollout status`, waits until it is
//! Completed (failing when it Stopped, or on `--timeout`). The others set
//! `ops.example.com/rollout` as `kubectl annotate` would, with the caller's own rights: the
//! admission webhook refuses it unless they may `rollout` pseudoflows there, and records who
//! asked, for which revision (`ops.example.com/rollout-by`); the controller acts only on that.
//! The patch carries the flow's resourceVersion as read and checked, so it fails (409, read and
//! checked again) if the flow changed before it landed.
//!
//! Split by concern: [`status`] shows and waits, [`act`] asks for an action; what both read
//! first (the rollout in status, a phase's name) and the verbs' parsing stay here.

mod act;
mod status;

use std::time::Duration;

use clap::Subcommand;
use kube::api::DynamicObject;
use pseudoflow_crd::rollout::RolloutAction;
use pseudoflow_crd::status::{RolloutPhase, RolloutStatus};
use serde_json::Value;

use crate::cluster::{status, Kube};

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
        } => status::status_of(k, &name, watch, timeout).await,
        RolloutVerb::Pause { name } => act::act(k, &name, RolloutAction::Pause).await,
        RolloutVerb::Resume { name } => act::act(k, &name, RolloutAction::Resume).await,
        RolloutVerb::Promote { name } => act::act(k, &name, RolloutAction::Promote).await,
        RolloutVerb::Undo { name } => act::act(k, &name, RolloutAction::Undo).await,
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

/// The rollout of bound flow `f`, or why it has none: what both `status` and the actions read
/// first.
pub(super) fn rollout_of(f: &DynamicObject) -> anyhow::Result<RolloutStatus> {
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

/// A phase as status and messages name it.
pub(super) fn phase_name(p: RolloutPhase) -> &'static str {
    match p {
        RolloutPhase::Progressing => "Progressing",
        RolloutPhase::Paused => "Paused",
        RolloutPhase::Stopped => "Stopped",
        RolloutPhase::Completed => "Completed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

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
}
