//! `logs NAME [STEP] [-f]`: the pod logs of the current run's Jobs, in step order, each line
//! prefixed with its step and node instance. A fused segment's pod runs several steps; the
//! executor marks each member's start with a `segment step starting` log record naming the
//! member's node id (runtime-image/src/segment.rs), which is how its lines are split per step.
//! A step the controller ran itself has no pod: it is named with why, not left out silently
//! (`placement.rs`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::bail;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use pseudoflow_crd::protocol::{INSTANCE_ANNOTATION, NODE_ID_ANNOTATION};
use pseudoflow_crd::PseudoFlowStatus;
use serde_json::Value;

use crate::cluster::{flow, status, Kube};
use crate::escape::printable;
use crate::get::{annotation, job_pods, run_jobs};

/// One pod's lines, attributed to steps.
struct PodLines {
    /// `(node id, line)` in order.
    lines: Vec<(String, String)>,
}

/// Splits a pod's log at the executor's segment markers; `head` is the Job's node.
fn attribute(head: &str, log: &str) -> PodLines {
    let mut current = head.to_string();
    let mut lines = Vec::new();
    for line in log.lines() {
        let text = match serde_json::from_str::<Value>(line) {
            Ok(v) if v.get("fields").is_some() => {
                let fields = &v["fields"];
                if fields["message"] == "segment step starting" {
                    if let Some(n) = fields["node"].as_str() {
                        current = n.to_string();
                    }
                }
                render_record(&v)
            }
            _ => line.to_string(),
        };
        lines.push((current.clone(), text));
    }
    PodLines { lines }
}

/// A JSON tracing record as `LEVEL message key=value ...`.
fn render_record(v: &Value) -> String {
    let mut out = format!(
        "{} {}",
        v["level"].as_str().unwrap_or(""),
        v["fields"]["message"].as_str().unwrap_or("")
    );
    if let Some(fields) = v["fields"].as_object() {
        for (k, val) in fields {
            if k == "message" {
                continue;
            }
            let s = match val {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out.push_str(&format!(" {k}={s}"));
        }
    }
    out
}

/// `kubectl pf logs`.
pub async fn logs(k: &Kube, name: &str, step: Option<&str>, follow: bool) -> anyhow::Result<()> {
    wait_for_run(k, name, follow).await?;
    let pods_api = Api::<Pod>::namespaced(k.client.clone(), &k.namespace);
    // Lines already printed per pod (for -f).
    let mut printed: BTreeMap<String, usize> = BTreeMap::new();
    loop {
        let f = flow(k, name).await?;
        let st = status(&f);
        let run_over = !matches!(
            st.phase,
            Some(pseudoflow_crd::FlowPhase::Running | pseudoflow_crd::FlowPhase::Pending) | None
        );
        // Step order and labels from status (again on every round of -f: steps are added to
        // status as the run reaches them); STEP resolved to a node id.
        let order: HashMap<String, usize> = st
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.clone(), i))
            .collect();
        let labels: HashMap<String, String> = st
            .steps
            .iter()
            .map(|s| (s.id.clone(), s.name.clone().unwrap_or_else(|| s.id.clone())))
            .collect();
        let wanted = match wanted_step(name, &st, step, follow && !run_over)? {
            Wanted::All => None,
            Wanted::Step(id) => Some(id),
            // Not reached yet: -f waits for it while the run goes on.
            Wanted::NotYet => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let round = Round {
            labels,
            wanted,
            hold_unlisted: follow && !run_over,
        };
        let jobs = ordered_jobs(k, name, &st, &order).await?;
        let all_done = print_jobs(k, &pods_api, &jobs, &mut printed, &round).await?;
        print_in_controller(name, &f.data, &st, &round, &mut printed);
        if !follow || (run_over && all_done) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits for the flow's first run: -f waits for a run to start; without it there is nothing
/// to show yet.
async fn wait_for_run(k: &Kube, name: &str, follow: bool) -> anyhow::Result<()> {
    let mut f = flow(k, name).await?;
    while status(&f).run.is_none() {
        if !follow {
            bail!("pseudoflow {name} has not run yet");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        f = flow(k, name).await?;
    }
    Ok(())
}

/// Which steps' lines to print.
enum Wanted {
    /// No STEP given: every step's.
    All,
    /// STEP, by node id.
    Step(String),
    /// STEP is not in status yet, and -f may wait for the run to reach it.
    NotYet,
}

/// STEP (an id, path or name) resolved against the steps status lists; an error naming the
/// steps there when it is not among them and `can_wait` is false.
fn wanted_step(
    name: &str,
    st: &PseudoFlowStatus,
    step: Option<&str>,
    can_wait: bool,
) -> anyhow::Result<Wanted> {
    let Some(q) = step else {
        return Ok(Wanted::All);
    };
    match st
        .steps
        .iter()
        .find(|s| s.id == q || s.path == q || s.name.as_deref() == Some(q))
    {
        Some(s) => Ok(Wanted::Step(s.id.clone())),
        None if can_wait => Ok(Wanted::NotYet),
        None => bail!(
            "pseudoflow {name} has no step {q:?} in its current run (steps: {})",
            st.steps
                .iter()
                .map(|s| s.name.clone().unwrap_or_else(|| s.id.clone()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The current run's Jobs in step order (`order`, by node id), then by instance and name.
async fn ordered_jobs(
    k: &Kube,
    name: &str,
    st: &PseudoFlowStatus,
    order: &HashMap<String, usize>,
) -> anyhow::Result<Vec<Job>> {
    let jobs = run_jobs(k, name, st).await?;
    let mut ordered: Vec<_> = jobs.into_values().flatten().collect();
    ordered.sort_by_key(|j| {
        (
            order
                .get(&annotation(j, NODE_ID_ANNOTATION))
                .copied()
                .unwrap_or(usize::MAX),
            annotation(j, INSTANCE_ANNOTATION),
            j.metadata.name.clone(),
        )
    });
    Ok(ordered)
}

/// What one round of printing knows of the run.
struct Round {
    /// Step labels by node id, from status.
    labels: HashMap<String, String>,
    /// The node id of STEP, when one was given.
    wanted: Option<String>,
    /// Lines of a step status does not list yet wait for the next round (-f while the run
    /// goes on).
    hold_unlisted: bool,
}

/// Prints the new lines of every pod of `jobs`; `printed` counts each pod's lines already
/// printed. True when every pod has finished.
async fn print_jobs(
    k: &Kube,
    pods_api: &Api<Pod>,
    jobs: &[Job],
    printed: &mut BTreeMap<String, usize>,
    round: &Round,
) -> anyhow::Result<bool> {
    let mut all_done = true;
    for j in jobs {
        let head = annotation(j, NODE_ID_ANNOTATION);
        let instance = annotation(j, INSTANCE_ANNOTATION);
        let job = j.metadata.name.clone().unwrap_or_default();
        for p in job_pods(k, &job).await? {
            let pod = p.metadata.name.clone().unwrap_or_default();
            let phase = p.status.as_ref().and_then(|s| s.phase.clone());
            let running = !matches!(phase.as_deref(), Some("Succeeded" | "Failed"));
            all_done &= !running;
            let text = match pods_api.logs(&pod, &LogParams::default()).await {
                Ok(t) => t,
                // A pod not started yet has no log.
                Err(_) if running => continue,
                Err(e) => return Err(e.into()),
            };
            let seen = printed.entry(pod.clone()).or_insert(0);
            *seen = print_lines(&attribute(&head, &text), &instance, *seen, round);
        }
    }
    Ok(all_done)
}

/// Says once, for each ended step that ran inside the controller, that it has no pod and so no
/// log (rather than printing nothing, as for a lost pod). Without STEP only API steps are told
/// (a `log` or `sleep` step never had a pod to look for); with STEP, any.
fn print_in_controller(
    name: &str,
    flow: &Value,
    st: &PseudoFlowStatus,
    round: &Round,
    printed: &mut BTreeMap<String, usize>,
) {
    use pseudoflow_crd::StepPhase;
    for s in &st.steps {
        let ended = matches!(s.phase, StepPhase::Succeeded | StepPhase::Failed);
        if !ended || round.wanted.as_ref().is_some_and(|w| *w != s.id) {
            continue;
        }
        let Some(placed) = crate::placement::ran_in_controller(flow, s) else {
            continue;
        };
        let told = printed
            .entry(format!("in-controller/{}", s.id))
            .or_insert(0);
        if *told > 0 || (round.wanted.is_none() && !placed.api) {
            continue;
        }
        *told = 1;
        let label = printable(round.labels.get(&s.id).unwrap_or(&s.id));
        outln!(
            "[{label}] ran inside the controller ({}): no pod, so no log; its outcome: `kubectl pf get {name}` and the flow's Events",
            placed.why
        );
    }
}

/// Prints a pod's lines from `seen` on, each prefixed with its step (and node instance);
/// returns how many of its lines are printed (or skipped) for good.
fn print_lines(pod: &PodLines, instance: &str, seen: usize, round: &Round) -> usize {
    for (i, (node, line)) in pod.lines.iter().enumerate().skip(seen) {
        // A step the pod started before status lists it: its lines wait for the
        // next round of -f, so they carry the step's name.
        if round.hold_unlisted && !round.labels.contains_key(node) {
            return i;
        }
        if round.wanted.as_ref().is_some_and(|w| w != node) {
            continue;
        }
        let label = round
            .labels
            .get(node)
            .cloned()
            .unwrap_or_else(|| node.clone());
        outln!("{}", log_line(&label, instance, line));
    }
    pod.lines.len()
}

/// One printed log line: `[step] line` or `[step instance] line`, control characters escaped
/// ([`printable`]): a step's output and a JSON log's decoded `\u001b` are others' text.
fn log_line(label: &str, instance: &str, line: &str) -> String {
    let (label, line) = (printable(label), printable(line));
    if instance.is_empty() {
        format!("[{label}] {line}")
    } else {
        format!("[{label} {}] {line}", printable(instance))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_the_segment_markers() {
        let log = [
            r#"{"level":"INFO","fields":{"message":"starting","node":"s0"}}"#,
            "plain output of s0",
            r#"{"level":"INFO","fields":{"message":"segment step starting","node":"s1","path":"spec.steps[1]"}}"#,
            "plain output of s1",
        ]
        .join("\n");
        let lines = attribute("s0", &log).lines;
        let nodes: Vec<&str> = lines.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(nodes, ["s0", "s0", "s1", "s1"]);
        assert_eq!(lines[0].1, "INFO starting node=s0");
        assert_eq!(
            lines[2].1,
            "INFO segment step starting node=s1 path=spec.steps[1]"
        );
        assert_eq!(lines[3].1, "plain output of s1");
    }

    #[test]
    fn attack_control_characters_in_a_log_line_are_printed_escaped() {
        // A step's output, or its pod's JSON log decoding `\u001b`, reaches the terminal.
        let log =
            r#"{"level":"INFO","fields":{"message":"x\u001b[2J\u001b]0;owned\u0007","node":"s0"}}"#;
        let decoded = &attribute("s0", log).lines[0].1;
        assert!(
            decoded.contains('\u{1b}'),
            "the JSON log decodes the escape: {decoded:?}"
        );
        let printed = log_line("step\u{1b}[31m", "node\n1", decoded);
        assert!(!printed.chars().any(char::is_control), "{printed:?}");
        assert_eq!(
            printed,
            "[step\\u{1b}[31m node\\n1] INFO x\\u{1b}[2J\\u{1b}]0;owned\\u{7} node=s0"
        );
        assert_eq!(log_line("s", "", "plain"), "[s] plain");
    }
}
