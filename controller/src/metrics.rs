//! Prometheus metrics on `/metrics`: `pseudoflow_runs_total{flow,status}`,
//! `pseudoflow_step_duration_seconds{flow,step_type}` (histogram, sub-second, every step type),
//! `pseudoflow_step_running_seconds{flow,step_type}` (age of the oldest step still running),
//! `pseudoflow_active_flows`, `pseudoflow_reconcile_errors_total{error}`.

use std::collections::{BTreeMap, BTreeSet};
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
    /// How long it took as the Job that ran it measured (seconds, sub-second), when a Job
    /// reported it: preferred over any clock of this process.
    pub took: Option<f64>,
}

/// What this process has seen of one step instance.
#[derive(Debug, Clone)]
struct StepWatched {
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
    clock: Mutex<BTreeMap<String, BTreeMap<String, StepWatched>>>,
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
                None => StepWatched {
                    step_type: s.step_type.clone(),
                    start: if now - recorded < 1.0 { now } else { recorded },
                    finished: false,
                },
            };
            let w = match (w.finished, s.finished_at) {
                (false, Some(end)) => {
                    let took = if let Some(took) = s.took {
                        took
                    } else if now - (end as f64) < 1.0 {
                        now - w.start
                    } else {
                        // It ended before this process looked: only whole seconds are known.
                        (end - s.started_at) as f64
                    };
                    ended.push((w.step_type.clone(), took.max(0.0)));
                    StepWatched {
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

    /// A reconcile failed with an error labelled `error` (see `flow::Error::label`).
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

    /// The text exposition format (Prometheus text 0.0.4), encoded by `prometheus-client` from
    /// a snapshot of the series taken under the locks, one at a time.
    pub fn render(&self) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(self.snapshot(unix_now())));
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
        out
    }

    /// Every series as it is at `now` (unix seconds).
    fn snapshot(&self, now: f64) -> Snapshot {
        let runs = self.runs.lock().expect("not poisoned").clone();
        let steps = self
            .steps
            .lock()
            .expect("not poisoned")
            .iter()
            .map(|(k, h)| {
                // Per-bucket counts: the encoder accumulates them.
                let mut below = 0;
                let buckets = BUCKETS
                    .iter()
                    .zip(h.counts)
                    .map(|(b, cumulative)| {
                        let n = cumulative - below;
                        below = cumulative;
                        (*b, n)
                    })
                    .collect();
                (k.clone(), (h.sum, h.count, buckets))
            })
            .collect();
        let mut running: BTreeMap<(String, String), f64> = BTreeMap::new();
        for (flow, steps) in self.clock.lock().expect("not poisoned").iter() {
            for w in steps.values().filter(|w| !w.finished) {
                let age = (now - w.start).max(0.0);
                let e = running
                    .entry((flow.clone(), w.step_type.clone()))
                    .or_insert(age);
                *e = e.max(age);
            }
        }
        let active = self
            .active
            .lock()
            .expect("not poisoned")
            .values()
            .filter(|(_, a)| *a)
            .count() as i64;
        let reconcile_errors = self.reconcile_errors.lock().expect("not poisoned").clone();
        Snapshot {
            runs,
            steps,
            running,
            active,
            reconcile_errors,
        }
    }
}

/// One histogram's sum, count and per-bucket (not cumulative) counts.
type HistSnapshot = (f64, u64, Vec<(f64, u64)>);

/// The series of [`Metrics`] at one instant, as a `prometheus-client` collector.
#[derive(Debug)]
struct Snapshot {
    runs: BTreeMap<(String, String), u64>,
    steps: BTreeMap<(String, String), HistSnapshot>,
    running: BTreeMap<(String, String), f64>,
    active: i64,
    reconcile_errors: BTreeMap<&'static str, u64>,
}

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType;
        let no_exemplar: Option<
            &prometheus_client::metrics::exemplar::Exemplar<
                prometheus_client::encoding::NoLabelSet,
                u64,
            >,
        > = None;
        // Counters get their `_total` suffix from the encoder.
        let mut m = encoder.encode_descriptor(
            "pseudoflow_runs",
            "Runs finished, by flow and final status.",
            None,
            MetricType::Counter,
        )?;
        for ((flow, status), n) in &self.runs {
            let labels = [("flow", flow.as_str()), ("status", status.as_str())];
            m.encode_family(&labels)?.encode_counter(n, no_exemplar)?;
        }
        let mut m = encoder.encode_descriptor(
            "pseudoflow_step_duration_seconds",
            "Duration of finished steps.",
            None,
            MetricType::Histogram,
        )?;
        for ((flow, ty), (sum, count, buckets)) in &self.steps {
            let labels = [("flow", flow.as_str()), ("step_type", ty.as_str())];
            m.encode_family(&labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    *sum, *count, buckets, None,
                )?;
        }
        let mut m = encoder.encode_descriptor(
            "pseudoflow_step_running_seconds",
            "How long the oldest step still running has run, by flow and step type.",
            None,
            MetricType::Gauge,
        )?;
        for ((flow, ty), age) in &self.running {
            let labels = [("flow", flow.as_str()), ("step_type", ty.as_str())];
            m.encode_family(&labels)?.encode_gauge(age)?;
        }
        encoder
            .encode_descriptor(
                "pseudoflow_active_flows",
                "Flows with a run in progress.",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&self.active)?;
        let mut m = encoder.encode_descriptor(
            "pseudoflow_reconcile_errors",
            "Failed reconciles (retried), by cause.",
            None,
            MetricType::Counter,
        )?;
        for (error, n) in &self.reconcile_errors {
            m.encode_family(&[("error", *error)])?
                .encode_counter(n, no_exemplar)?;
        }
        Ok(())
    }
}

/// Now, in unix seconds with sub-second precision.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
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
            took: None,
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
    fn a_job_step_is_timed_as_its_job_measured_it_however_late_its_end_is_seen() {
        let m = Metrics::default();
        m.observe_steps("ns/a", "u", 100.5, vec![seen("r1/s0", "apply", 100, None)]);
        // Its end is seen 1.4 s after the second it was recorded in (a busy controller): the
        // whole-second times would say 1 s, the Job measured 0.75 s.
        let ended = StepSeen {
            took: Some(0.75),
            ..seen("r1/s0", "apply", 100, Some(101))
        };
        m.observe_steps("ns/a", "u", 102.4, vec![ended]);
        assert_eq!(sum_and_count(&m.render(), "ns/a", "apply"), (0.75, 1));
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
