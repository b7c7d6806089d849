//! Prometheus metrics on `/metrics`: `pseudoflow_runs_total{flow,status}`,
//! `pseudoflow_step_duration_seconds{flow,step_type}` (histogram), `pseudoflow_active_flows`,
//! `pseudoflow_reconcile_errors_total{error}`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::Mutex;

/// Histogram bucket bounds (seconds) for step durations.
pub const BUCKETS: [f64; 10] = [0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0];

#[derive(Default)]
struct Hist {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// All metrics of one controller process.
#[derive(Default)]
pub struct Metrics {
    runs: Mutex<BTreeMap<(String, String), u64>>,
    steps: Mutex<BTreeMap<(String, String), Hist>>,
    active: Mutex<BTreeMap<String, bool>>,
    reconcile_errors: Mutex<BTreeMap<&'static str, u64>>,
}

impl Metrics {
    /// A run of `flow` ended with `status` (Succeeded, Failed, Aborted).
    pub fn run_finished(&self, flow: &str, status: &str) {
        *self
            .runs
            .lock()
            .unwrap()
            .entry((flow.into(), status.into()))
            .or_default() += 1;
    }

    /// A step of `flow` took `seconds`.
    pub fn step_finished(&self, flow: &str, step_type: &str, seconds: f64) {
        let mut steps = self.steps.lock().unwrap();
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
            .unwrap()
            .entry(error)
            .or_default() += 1;
    }

    /// Whether `flow` has a run in progress.
    pub fn set_active(&self, flow: &str, active: bool) {
        self.active.lock().unwrap().insert(flow.into(), active);
    }

    /// Drops every series of `flow` (`namespace/name`): it was deleted, and a gauge or counter
    /// of a flow that no longer exists would be reported forever.
    pub fn forget(&self, flow: &str) {
        self.runs.lock().unwrap().retain(|(f, _), _| f != flow);
        self.steps.lock().unwrap().retain(|(f, _), _| f != flow);
        self.active.lock().unwrap().remove(flow);
    }

    /// Every flow some series is kept for.
    pub fn flows(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.active.lock().unwrap().keys().cloned().collect();
        out.extend(self.runs.lock().unwrap().keys().map(|(f, _)| f.clone()));
        out.extend(self.steps.lock().unwrap().keys().map(|(f, _)| f.clone()));
        out
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP pseudoflow_runs_total Runs finished, by flow and final status.\n# TYPE pseudoflow_runs_total counter\n");
        for ((flow, status), n) in self.runs.lock().unwrap().iter() {
            let _ = writeln!(
                out,
                "pseudoflow_runs_total{{flow=\"{flow}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP pseudoflow_step_duration_seconds Duration of finished steps.\n# TYPE pseudoflow_step_duration_seconds histogram\n");
        for ((flow, ty), h) in self.steps.lock().unwrap().iter() {
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
        let active = self.active.lock().unwrap().values().filter(|a| **a).count();
        let _ = writeln!(out, "# HELP pseudoflow_active_flows Flows with a run in progress.\n# TYPE pseudoflow_active_flows gauge\npseudoflow_active_flows {active}");
        out.push_str("# HELP pseudoflow_reconcile_errors_total Failed reconciles (retried), by cause.\n# TYPE pseudoflow_reconcile_errors_total counter\n");
        for (error, n) in self.reconcile_errors.lock().unwrap().iter() {
            let _ = writeln!(
                out,
                "pseudoflow_reconcile_errors_total{{error=\"{error}\"}} {n}"
            );
        }
        out
    }
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
        m.set_active("ns/a", true);
        m.reconcile_failed("kube");
        let text = m.render();
        assert!(
            text.contains("pseudoflow_runs_total{flow=\"ns/a\",status=\"Succeeded\"} 1"),
            "{text}"
        );
        assert!(text.contains("pseudoflow_step_duration_seconds_bucket{flow=\"ns/a\",step_type=\"apply\",le=\"0.5\"} 0"), "{text}");
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
            m.set_active(flow, true);
        }
        m.forget("ns/a");
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
}
