//! API requests a workload cost, read from kube-apiserver's own counter
//! (`apiserver_request_total`, by verb and resource) before and after it: the figure that
//! explains an operator's speed on a shared control plane, since every request waits in the
//! same API server (and its writes in the same etcd). Counts every client (the scheduler and
//! kube-controller-manager too), so two drivers measured the same way are compared fairly.

use std::collections::BTreeMap;
use std::path::Path;

use kube::Client;

/// Requests served so far, by `VERB resource[/subresource]`, and the CPU seconds the API
/// server had used (`process_cpu_seconds_total`): where a burst's time went on a machine whose
/// cores the API server shares with the driver.
#[derive(Debug, Clone, Default)]
pub struct Requests(BTreeMap<String, f64>, f64, BTreeMap<String, f64>);

impl Requests {
    /// The API server's counters now.
    pub async fn now(client: &Client) -> Requests {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = client.request_text(req).await.unwrap_or_default();
        Requests(
            parse(&text, "apiserver_request_total{"),
            cpu_seconds(&text),
            parse(&text, "apiserver_request_duration_seconds_sum{"),
        )
    }

    /// What was served between `self` and `later`.
    pub fn until(&self, later: &Requests) -> Requests {
        Requests(
            difference(&self.0, &later.0),
            later.1 - self.1,
            difference(&self.2, &later.2),
        )
    }

    /// CPU seconds kube-apiserver spent (between two readings, after [`Requests::until`]).
    pub fn apiserver_cpu(&self) -> f64 {
        self.1
    }

    /// All requests, and the writes among them (POST, PUT, PATCH, DELETE).
    pub fn totals(&self) -> (f64, f64) {
        let writes = self
            .0
            .iter()
            .filter(|(k, _)| {
                ["POST ", "PUT ", "PATCH ", "DELETE "]
                    .iter()
                    .any(|w| k.starts_with(w))
            })
            .map(|(_, v)| v)
            .sum();
        (self.0.values().sum(), writes)
    }

    /// "requests/object N (writes W)" for `objects` objects.
    pub fn per_object(&self, objects: usize) -> String {
        let (all, writes) = self.totals();
        let n = objects.max(1) as f64;
        format!(
            "API requests/object {:.1} (writes {:.1})",
            all / n,
            writes / n
        )
    }

    /// Writes the breakdown per object to `file`, largest first, for whoever asks why.
    pub fn save(&self, file: &Path, objects: usize) {
        let mut rows: Vec<_> = self.0.iter().collect();
        rows.sort_by(|a, b| b.1.total_cmp(a.1));
        let n = objects.max(1) as f64;
        let text: String = rows
            .iter()
            .map(|(k, v)| {
                let secs = self.2.get(*k).copied().unwrap_or(0.0);
                format!(
                    "{:8.2}  {k:<28} {:7.1} ms each (API server latency)\n",
                    *v / n,
                    1000.0 * secs / **v
                )
            })
            .collect();
        let cpu = format!("{:8.4}  kube-apiserver CPU seconds\n", self.1 / n);
        let _ = std::fs::write(file, text + &cpu);
    }
}

/// The API server's `process_cpu_seconds_total`.
fn cpu_seconds(text: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix("process_cpu_seconds_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits (at most two minutes) until the API server serves fewer than 10 requests a second:
/// the garbage collector's checks of the owners of what the last driver made (kube-controller-
/// manager's client is rate-limited, so they trail a burst by many seconds) must not land in
/// the next driver's burst, where they would slow it and flatter the one before.
pub async fn settle(client: &Client) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        let before = Requests::now(client).await;
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let (all, _) = before.until(&Requests::now(client).await).totals();
        if all < 20.0 {
            return;
        }
    }
}

/// What grew from `before` to `after`, per key.
fn difference(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    let mut d = BTreeMap::new();
    for (k, v) in after {
        let n = v - before.get(k).copied().unwrap_or(0.0);
        if n > 0.0 {
            d.insert(k.clone(), n);
        }
    }
    d
}

/// When `PSEUDOFLOW_BENCH_PPROF=<seconds>` is set, a CPU profile of kube-apiserver over the next
/// seconds (its `/debug/pprof/profile`; testenv serves it with `PSEUDOFLOW_TESTENV_PROFILING=1`):
/// which of the API server's work a burst cost, for `go tool pprof -top`.
pub fn profile_if_asked(client: &Client) -> Option<tokio::task::JoinHandle<Vec<u8>>> {
    let secs: u64 = std::env::var("PSEUDOFLOW_BENCH_PPROF").ok()?.parse().ok()?;
    let client = client.clone();
    Some(tokio::spawn(async move {
        let uri = format!("/debug/pprof/profile?seconds={secs}");
        let req = http::Request::get(uri).body(Vec::new()).unwrap();
        let mut bytes = Vec::new();
        if let Ok(mut body) = client.request_stream(req).await {
            let _ = futures::AsyncReadExt::read_to_end(&mut body, &mut bytes).await;
        }
        bytes
    }))
}

/// Writes the profile [`profile_if_asked`] took, if any.
pub async fn save_profile(profile: Option<tokio::task::JoinHandle<Vec<u8>>>, file: &Path) {
    if let Some(Ok(bytes)) = match profile {
        Some(p) => Some(p.await),
        None => None,
    } {
        let _ = std::fs::write(file, bytes);
    }
}

/// Sums `metric{...}` samples by verb and resource (over codes, scopes, clients).
fn parse(text: &str, metric: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let (verb, resource, sub) = (label("verb"), label("resource"), label("subresource"));
        if verb == "WATCH" || verb == "CONNECT" {
            continue;
        }
        let key = if sub.is_empty() {
            format!("{verb} {resource}")
        } else {
            format!("{verb} {resource}/{sub}")
        };
        *out.entry(key).or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    out
}
