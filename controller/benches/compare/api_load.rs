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
pub struct Requests(BTreeMap<String, f64>, f64);

impl Requests {
    /// The API server's counters now.
    pub async fn now(client: &Client) -> Requests {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = client.request_text(req).await.unwrap_or_default();
        Requests(parse(&text), cpu_seconds(&text))
    }

    /// What was served between `self` and `later`.
    pub fn until(&self, later: &Requests) -> Requests {
        let mut d = BTreeMap::new();
        for (k, v) in &later.0 {
            let n = v - self.0.get(k).copied().unwrap_or(0.0);
            if n > 0.0 {
                d.insert(k.clone(), n);
            }
        }
        Requests(d, later.1 - self.1)
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
            .map(|(k, v)| format!("{:8.2}  {k}\n", *v / n))
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

/// Sums `apiserver_request_total` samples by verb and resource (over codes, scopes, clients).
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
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
