//! Waiting for a named condition, with what a person needs to read a timeout: every test that
//! waits says what for and how long, and when the time runs out it prints the objects the
//! condition is about and their Events (oldest first, by `eventTime`), not just "not within
//! 60s". A flake is then read from its first failure, not re-run.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;

use crate::flows::{event_time, flows};

/// An object a wait shows when it times out: its metadata, spec and status, and its Events.
pub struct Shown {
    api: Api<DynamicObject>,
    ns: String,
    name: String,
}

impl Shown {
    /// Object `name` of `api` (in namespace `ns`, where its Events are).
    pub fn object(api: Api<DynamicObject>, ns: &str, name: &str) -> Shown {
        Shown {
            api,
            ns: ns.to_string(),
            name: name.to_string(),
        }
    }

    /// Flow `name` of `ns`.
    pub fn flow(client: &Client, ns: &str, name: &str) -> Shown {
        Shown::object(flows(client, ns), ns, name)
    }

    async fn dump(&self, client: &Client) -> String {
        let object = match self.api.get_opt(&self.name).await {
            Ok(Some(mut o)) => {
                o.metadata.managed_fields = None;
                serde_yaml::to_string(&o).unwrap_or_default()
            }
            Ok(None) => "(absent)\n".into(),
            Err(e) => format!("(cannot be read: {e})\n"),
        };
        let lp = ListParams::default().fields(&format!("involvedObject.name={}", self.name));
        let events = match Api::<Event>::namespaced(client.clone(), &self.ns)
            .list(&lp)
            .await
        {
            Ok(list) => {
                let mut items = list.items;
                items.sort_by_key(event_time);
                items
                    .iter()
                    .map(|e| {
                        let at = event_time(e).map(|t| t.to_string()).unwrap_or_default();
                        let (reason, note) = (e.reason.as_deref(), e.message.as_deref());
                        let series = e.series.as_ref().and_then(|s| s.count);
                        let count = series.or(e.count).unwrap_or(1);
                        format!(
                            "  {at} {} x{count}: {}\n",
                            reason.unwrap_or(""),
                            note.unwrap_or("")
                        )
                    })
                    .collect::<String>()
            }
            Err(e) => format!("  (cannot be listed: {e})\n"),
        };
        format!(
            "--- {}/{}:\n{object}--- its Events:\n{events}",
            self.ns, self.name
        )
    }
}

/// Polls `check` every 200 ms until it holds. After `secs` it panics naming `condition`,
/// showing each of `shown` and its Events.
pub async fn wait_until<F, Fut>(
    client: &Client,
    condition: &str,
    secs: u64,
    shown: &[Shown],
    check: F,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        if Instant::now() >= deadline {
            let mut dump = String::new();
            for s in shown {
                dump.push_str(&s.dump(client).await);
            }
            panic!("waited {secs}s for: {condition}\n{dump}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
