//! Prometheus metrics on `/metrics`: `pseudoflow_runs_total{flow,status}`,
//! `pseudoflow_step_duration_seconds{flow,step_type}` (histogram, sub-second, every step type),
//! `pseudoflow_step_running_seconds{flow,step_type}` (age of the oldest step still running),
//! `pseudoflow_active_flows`, `pseudoflow_reconcile_errors_total{error}`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::Mutex;

/// Histogram bucket bounds (seconds) for step durations: controller-local steps take
/// milliseconds, API steps about a second, node rollouts and waits minutes.
pub const BUCKETS: [f64; 14] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0,
];

#[derive(Default)]
struct Hist {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// One step instance as a reconcile saw it (see [`Metrics::observe_steps`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StepSeen {
    /// Unique within the flow: run, step path, loop key and attempt.
    pub id: String,
    /// The step's type (`waitFor`, `loop`, ...).
    pub step_type: String,
    /// Its recorded start (unix seconds): used for a step this process did not see start.
    pub started_at: i64,
    /// Its recorded end (unix seconds), once it ended.
    pub finished_at: Option<i64>,
}

/// What this process has seen of one step instance.
#[derive(Debug, Clone)]
struct Watched {
    step_type: String,
    /// When it started (unix seconds, sub-second when this process saw it start).
    start: f64,
    /// Its duration was recorded.
    finished: bool,
}

/// All metrics of one controller process.
#[derive(Default)]
pub struct Metrics {
    runs: Mutex<BTreeMap<(String, String), u64>>,
    steps: Mutex<BTreeMap<(String, String), Hist>>,
    /// Per flow: the uid it was last seen with and whether it has a run in progress.
    active: Mutex<BTreeMap<String, (String, bool)>>,
    /// Flows deleted (by key, with the uid they had): a reconcile still under way when the
    /// deletion arrived must not bring their series back.
    gone: Mutex<BTreeMap<String, String>>,
    /// Per flow: the step instances of its current runs.
    clock: Mutex<BTreeMap<String, BTreeMap<String, Watched>>>,
    reconcile_errors: Mutex<BTreeMap<&'static str, u64>>,
}

impl Metrics {
    /// A run of `flow` ended with `status` (Succeeded, Failed, Aborted).
    pub fn run_finished(&self, flow: &str, status: &str) {
        *self
            .runs
            .lock()
            .expect("not poisoned")
            .entry((flow.into(), status.into()))
            .or_default() += 1;
    }

    /// What a reconcile of `flow` (object `uid`) saw of its run's steps at `now` (unix seconds,
    /// sub-second): a step seen ending for the first time has its duration recorded, timed
    /// from when this process first saw it (so to the reconcile, not to the second), or from
    /// its recorded start if it started before this process saw it; steps still running are
    /// kept for `pseudoflow_step_running_seconds`. Steps of runs no longer seen are dropped.
    pub fn observe_steps(&self, flow: &str, uid: &str, now: f64, seen: Vec<StepSeen>) {
        if self.is_gone(flow, uid) {
            return;
        }
        let mut clock = self.clock.lock().expect("not poisoned");
        let mut before = clock.remove(flow).unwrap_or_default();
        let mut after = BTreeMap::new();
        let mut ended = Vec::new();
        for s in seen {
            let recorded = s.started_at as f64;
            let w = match before.remove(&s.id) {
                Some(w) => w,
                // Seen within a second of its recorded start: this reconcile started it.
                None => Watched {
                    step_type: s.step_type.clone(),
                    start: if now - recorded < 1.0 { now } else { recorded },
                    finished: false,
                },
            };
            let w = match (w.finished, s.finished_at) {
                (false, Some(end)) => {
                    let took = if now - (end as f64) < 1.0 {
                        now - w.start
                    } else {
                        // It ended before this process looked: only whole seconds are known.
                        (end - s.started_at) as f64
                    };
                    ended.push((w.step_type.clone(), took.max(0.0)));
                    Watched {
                        finished: true,
                        ..w
                    }
                }
                _ => w,
            };
            after.insert(s.id, w);
        }
        if !after.is_empty() {
            clock.insert(flow.to_string(), after);
        }
        drop(clock);
        for (ty, took) in ended {
            self.step_finished(flow, &ty, took);
        }
    }

    /// A step of `flow` took `seconds`.
    pub fn step_finished(&self, flow: &str, step_type: &str, seconds: f64) {
        let mut steps = self.steps.lock().expect("not poisoned");
        let h = steps.entry((flow.into(), step_type.into())).or_default();
        for (i, b) in BUCKETS.iter().enumerate() {
            if seconds <= *b {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    /// A reconcile failed with an error labelled `error` (see `reconcile::Error::label`).
    pub fn reconcile_failed(&self, error: &'static str) {
        *self
            .reconcile_errors
            .lock()
            .expect("not poisoned")
            .entry(error)
            .or_default() += 1;
    }

    /// Whether `flow` (the object with `uid`) has a run in progress. Ignored for a flow
    /// [`Metrics::forget`] dropped: a reconcile that began before the deletion ends after it.
    pub fn set_active(&self, flow: &str, uid: &str, active: bool) {
        if self.is_gone(flow, uid) {
            return;
        }
        self.active
            .lock()
            .expect("not poisoned")
            .insert(flow.into(), (uid.into(), active));
    }

    /// Whether `flow` was deleted as the object `uid`; a flow created again under the same name
    /// (another uid) is not.
    fn is_gone(&self, flow: &str, uid: &str) -> bool {
        let mut gone = self.gone.lock().expect("not poisoned");
        match gone.get(flow) {
            Some(u) if u == uid => true,
            Some(_) => {
                gone.remove(flow);
                false
            }
            None => false,
        }
    }

    /// Drops every series of `flow` (`namespace/name`): it was deleted (as object `uid`, when
    /// known), and a gauge or counter of a flow that no longer exists would be reported forever.
    pub fn forget(&self, flow: &str, uid: Option<&str>) {
        self.runs
            .lock()
            .expect("not poisoned")
            .retain(|(f, _), _| f != flow);
        self.steps
            .lock()
            .expect("not poisoned")
            .retain(|(f, _), _| f != flow);
        self.clock.lock().expect("not poisoned").remove(flow);
        let last = self
            .active
            .lock()
            .expect("not poisoned")
            .remove(flow)
            .map(|(u, _)| u);
        if let Some(uid) = uid.map(str::to_string).or(last) {
            self.gone
                .lock()
                .expect("not poisoned")
                .insert(flow.into(), uid);
        }
    }

    /// Every flow some series is kept for.
    pub fn flows(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self
            .active
            .lock()
            .expect("not poisoned")
            .keys()
            .cloned()
            .collect();
        out.extend(self.clock.lock().expect("not poisoned").keys().cloned());
        out.extend(
            self.runs
                .lock()
                .expect("not poisoned")
                .keys()
                .map(|(f, _)| f.clone()),
        );
        out.extend(
            self.steps
                .lock()
                .expect("not poisoned")
                .keys()
                .map(|(f, _)| f.clone()),
        );
        out
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP pseudoflow_runs_total Runs finished, by flow and final status.\n# TYPE pseudoflow_runs_total counter\n");
        for ((flow, status), n) in self.runs.lock().expect("not poisoned").iter() {
            let _ = writeln!(
                out,
                "pseudoflow_runs_total{{flow=\"{flow}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP pseudoflow_step_duration_seconds Duration of finished steps.\n# TYPE pseudoflow_step_duration_seconds histogram\n");
        for ((flow, ty), h) in self.steps.lock().expect("not poisoned").iter() {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(out, "pseudoflow_step_duration_seconds_bucket{{flow=\"{flow}\",step_type=\"{ty}\",le=\"{b}\"}} {}", h.counts[i]);
            }
            let _ = writeln!(out, "pseudoflow_step_duration_seconds_bucket{{flow=\"{flow}\",step_type=\"{ty}\",le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(
                out,
                "pseudoflow_step_duration_seconds_sum{{flow=\"{flow}\",step_type=\"{ty}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "pseudoflow_step_duration_seconds_count{{flow=\"{flow}\",step_type=\"{ty}\"}} {}",
                h.count
            );
        }
        out.push_str("# HELP pseudoflow_step_running_seconds How long the oldest step still running has run, by flow and step type.\n# TYPE pseudoflow_step_running_seconds gauge\n");
        let now = unix_now();
        let mut oldest: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        let clock = self.clock.lock().expect("not poisoned");
        for (flow, steps) in clock.iter() {
            for w in steps.values().filter(|w| !w.finished) {
                let age = (now - w.start).max(0.0);
                let e = oldest.entry((flow, &w.step_type)).or_insert(age);
                *e = e.max(age);
            }
        }
        for ((flow, ty), age) in oldest {
            let _ = writeln!(
                out,
                "pseudoflow_step_running_seconds{{flow=\"{flow}\",step_type=\"{ty}\"}} {age:.3}"
            );
        }
        drop(clock);
        let active = self
            .active
            .lock()
            .expect("not poisoned")
            .values()
            .filter(|(_, a)| *a)
            .count();
        let _ = writeln!(out, "# HELP pseudoflow_active_flows Flows with a run in progress.\n# TYPE pseudoflow_active_flows gauge\npseudoflow_active_flows {active}");
        out.push_str("# HELP pseudoflow_reconcile_errors_total Failed reconciles (retried), by cause.\n# TYPE pseudoflow_reconcile_errors_total counter\n");
        for (error, n) in self.reconcile_errors.lock().expect("not poisoned").iter() {
            let _ = writeln!(
                out,
                "pseudoflow_reconcile_errors_total{{error=\"{error}\"}} {n}"
            );
        }
        out
    }
}

/// Now, in unix seconds with sub-second precision.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// Serves `/metrics` on `addr` with a minimal HTTP/1.1 responder (no other paths).
pub async fn serve(
    addr: std::net::SocketAddr,
    metrics: std::sync::Arc<Metrics>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    loop {
        let (mut sock, _) = listener.accept().await?;
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let n = sock.read(&mut buf).await.unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]);
            let (code, body) = if req.starts_with("GET /metrics") {
                ("200 OK", metrics.render())
            } else {
                ("404 Not Found", String::new())
            };
            let resp = format!("HTTP/1.1 {code}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = sock.write_all(resp.as_bytes()).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_the_three_metrics_with_labels() {
        let m = Metrics::default();
        m.run_finished("ns/a", "Succeeded");
        m.step_finished("ns/a", "apply", 0.7);
        m.set_active("ns/a", "u1", true);
        m.reconcile_failed("kube");
        let text = m.render();
        assert!(
            text.contains("pseudoflow_runs_total{flow=\"ns/a\",status=\"Succeeded\"} 1"),
            "{text}"
        );
        assert!(text.contains("pseudoflow_step_duration_seconds_bucket{flow=\"ns/a\",step_type=\"apply\",le=\"0.5\"} 0"), "{text}");
        assert!(text.contains("pseudoflow_step_duration_seconds_bucket{flow=\"ns/a\",step_type=\"apply\",le=\"0.01\"} 0"), "{text}");
        assert!(text.contains("pseudoflow_step_duration_seconds_bucket{flow=\"ns/a\",step_type=\"apply\",le=\"1\"} 1"), "{text}");
        assert!(text.contains("pseudoflow_active_flows 1"), "{text}");
        assert!(
            text.contains("pseudoflow_reconcile_errors_total{error=\"kube\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn a_forgotten_flow_leaves_no_series_and_others_keep_theirs() {
        let m = Metrics::default();
        for flow in ["ns/a", "ns/b"] {
            m.run_finished(flow, "Failed");
            m.step_finished(flow, "apply", 3.0);
            m.set_active(flow, "u1", true);
        }
        m.forget("ns/a", None);
        let text = m.render();
        assert!(!text.contains("ns/a"), "{text}");
        assert!(text.contains("pseudoflow_active_flows 1"), "{text}");
        assert!(
            text.contains("pseudoflow_runs_total{flow=\"ns/b\",status=\"Failed\"} 1"),
            "{text}"
        );
        assert!(text.contains("step_type=\"apply\",le=\"5\"} 1"), "{text}");
        assert_eq!(m.flows(), ["ns/b".to_string()].into());
    }

    fn seen(id: &str, ty: &str, started_at: i64, finished_at: Option<i64>) -> StepSeen {
        StepSeen {
            id: id.into(),
            step_type: ty.into(),
            started_at,
            finished_at,
        }
    }

    fn sum_and_count(text: &str, flow: &str, ty: &str) -> (f64, u64) {
        let line = |what: &str| {
            let prefix = format!(
                "pseudoflow_step_duration_seconds_{what}{{flow=\"{flow}\",step_type=\"{ty}\"}} "
            );
            text.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_string))
                .unwrap_or_else(|| panic!("no {what} for {ty}: {text}"))
        };
        (line("sum").parse().unwrap(), line("count").parse().unwrap())
    }

    #[test]
    fn steps_are_timed_from_when_this_process_saw_them_to_the_sub_second() {
        let m = Metrics::default();
        // t=100.25: a waitFor and a log start; the log also ends (a controller-local step).
        m.observe_steps(
            "ns/a",
            "u",
            100.25,
            vec![
                seen("r1/s0", "waitFor", 100, None),
                seen("r1/s1", "log", 100, Some(100)),
            ],
        );
        // t=101.0: still running; seen again, nothing recorded twice.
        m.observe_steps(
            "ns/a",
            "u",
            101.0,
            vec![
                seen("r1/s0", "waitFor", 100, None),
                seen("r1/s1", "log", 100, Some(100)),
            ],
        );
        let text = m.render();
        assert_eq!(sum_and_count(&text, "ns/a", "log"), (0.0, 1));
        assert!(
            text.contains("pseudoflow_step_running_seconds{flow=\"ns/a\",step_type=\"waitFor\"}"),
            "{text}"
        );
        // t=102.75: the waitFor ends: 2.5 s, not the 2 s its whole-second times say.
        m.observe_steps(
            "ns/a",
            "u",
            102.75,
            vec![
                seen("r1/s0", "waitFor", 100, Some(102)),
                seen("r1/s1", "log", 100, Some(100)),
            ],
        );
        let text = m.render();
        assert_eq!(sum_and_count(&text, "ns/a", "waitFor"), (2.5, 1));
        assert!(
            text.contains("step_type=\"waitFor\",le=\"2.5\"} 1"),
            "{text}"
        );
        assert!(text.contains("step_type=\"waitFor\",le=\"1\"} 0"), "{text}");
        assert!(!text.contains("pseudoflow_step_running_seconds{"), "{text}");
        // A step that started and ended while this process was away: its recorded seconds.
        m.observe_steps(
            "ns/a",
            "u",
            500.5,
            vec![seen("r2/s0", "exec", 400, Some(460))],
        );
        assert_eq!(sum_and_count(&m.render(), "ns/a", "exec"), (60.0, 1));
    }

    #[test]
    fn a_step_still_running_reports_its_age() {
        let m = Metrics::default();
        let now = unix_now();
        let started = now as i64 - 900;
        m.observe_steps(
            "ns/slow",
            "u",
            now,
            vec![seen("r1/s0", "waitFor", started, None)],
        );
        let text = m.render();
        let age: f64 = text
            .lines()
            .find_map(|l| {
                l.strip_prefix(
                    "pseudoflow_step_running_seconds{flow=\"ns/slow\",step_type=\"waitFor\"} ",
                )
            })
            .unwrap_or_else(|| panic!("{text}"))
            .parse()
            .unwrap();
        assert!((900.0..910.0).contains(&age), "{age}");
    }

    #[test]
    fn a_deleted_flow_stays_gone_when_a_late_reconcile_reports_it() {
        let m = Metrics::default();
        m.set_active("ns/a", "u1", true);
        m.observe_steps(
            "ns/a",
            "u1",
            unix_now(),
            vec![seen("r1/s0", "waitFor", 0, None)],
        );
        m.forget("ns/a", Some("u1"));
        // A reconcile that began before the deletion ends after it.
        m.set_active("ns/a", "u1", true);
        m.observe_steps(
            "ns/a",
            "u1",
            unix_now(),
            vec![seen("r1/s0", "waitFor", 0, None)],
        );
        let text = m.render();
        assert!(text.contains("pseudoflow_active_flows 0"), "{text}");
        assert!(!text.contains("ns/a"), "{text}");
        // The same name created again is another object.
        m.set_active("ns/a", "u2", true);
        assert!(m.render().contains("pseudoflow_active_flows 1"));
        // Forgotten without a uid (missing from a relist): the last one seen is the one gone.
        m.forget("ns/a", None);
        m.set_active("ns/a", "u2", true);
        assert!(m.render().contains("pseudoflow_active_flows 0"));
    }
}
