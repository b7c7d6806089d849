//! Leader election on a `coordination.k8s.io/v1` Lease, so several replicas can run and only one
//! drives flows. The usual client-go scheme: hold the Lease by renewing it; take it over when it
//! is free or its holder stopped renewing for a lease duration; every write is an update guarded
//! by the resourceVersion, so two candidates never both win. Only `get`, `create` and `update` on
//! leases are used — what the chart's Role grants.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tracing::{info, warn};

/// Where the Lease lives and how it is held.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// The Lease's name: one per controller installation.
    pub name: String,
    /// Where the Lease lives (the controller's own namespace).
    pub namespace: String,
    /// Unique per process: pod name plus a random suffix.
    pub identity: String,
    /// How long a holder that stopped renewing keeps the Lease.
    pub duration: Duration,
    /// How often the holder renews.
    pub renew_every: Duration,
    /// How often a candidate retries.
    pub retry_every: Duration,
}

impl LeaseConfig {
    /// The controller's Lease in `namespace`, 15 s duration, renewed every 5 s.
    pub fn new(namespace: &str, identity: &str) -> Self {
        LeaseConfig {
            name: "pseudoflow-controller".into(),
            namespace: namespace.into(),
            identity: identity.into(),
            duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            retry_every: Duration::from_secs(2),
        }
    }
}

/// Why leadership could not be held.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// An API call on the Lease failed (the Lease, the error).
    #[error("lease {0}: {1}")]
    Api(String, #[source] kube::Error),
    /// Another replica holds the Lease now (the Lease, the holder).
    #[error("lease {0} was taken over by {1:?}")]
    Lost(String, String),
}

/// What a candidate should do with the Lease as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseDecision {
    /// No Lease yet: create it holding it.
    Create,
    /// Free or expired: take it over.
    TakeOver,
    /// Ours: renew it.
    Renew,
    /// Someone else holds it until about this time.
    Wait(Timestamp),
}

/// The pure rule (unit-tested): who may hold `lease` at `now`.
pub fn decide(lease: Option<&LeaseSpec>, me: &str, now: Timestamp) -> LeaseDecision {
    let Some(spec) = lease else {
        return LeaseDecision::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == me {
        return LeaseDecision::Renew;
    }
    if holder.is_empty() {
        return LeaseDecision::TakeOver;
    }
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0).max(1));
    match renewed {
        Some(t) => {
            let until = t
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(duration))
                .unwrap_or(t);
            if until <= now {
                LeaseDecision::TakeOver
            } else {
                LeaseDecision::Wait(until)
            }
        }
        None => LeaseDecision::TakeOver,
    }
}

fn held_by(cfg: &LeaseConfig, previous: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    let ours = previous.and_then(|p| p.holder_identity.as_deref()) == Some(cfg.identity.as_str());
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.duration.as_secs() as i32),
        acquire_time: if ours {
            previous.and_then(|p| p.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if ours { transitions } else { transitions + 1 }),
        ..Default::default()
    }
}

/// One attempt to hold the Lease; `Ok(true)` when we hold it afterwards.
pub async fn try_hold(client: &Client, cfg: &LeaseConfig) -> Result<bool, LeaderError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let err = |e| LeaderError::Api(format!("{}/{}", cfg.namespace, cfg.name), e);
    let now = Timestamp::now();
    let current = api.get_opt(&cfg.name).await.map_err(err)?;
    let decision = decide(
        current.as_ref().and_then(|l| l.spec.as_ref()),
        &cfg.identity,
        now,
    );
    let result = match (decision, current) {
        (LeaseDecision::Wait(_), _) => return Ok(false),
        (LeaseDecision::Create, _) => {
            let lease = Lease {
                metadata: kube::api::ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(held_by(cfg, None, now)),
            };
            api.create(&PostParams::default(), &lease).await.map(|_| ())
        }
        (_, Some(mut lease)) => {
            lease.spec = Some(held_by(cfg, lease.spec.as_ref(), now));
            // `replace` sends the resourceVersion we read: a concurrent writer makes this a 409.
            api.replace(&cfg.name, &PostParams::default(), &lease)
                .await
                .map(|_| ())
        }
        (_, None) => return Ok(false),
    };
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(err(e)),
    }
}

/// Waits until this process holds the Lease.
pub async fn acquire(client: &Client, cfg: &LeaseConfig) -> Result<(), LeaderError> {
    loop {
        match try_hold(client, cfg).await {
            Ok(true) => {
                info!(lease = %cfg.name, identity = %cfg.identity, "became leader");
                return Ok(());
            }
            Ok(false) => {}
            Err(e) => warn!("{e}"),
        }
        tokio::time::sleep(cfg.retry_every).await;
    }
}

/// Renews the Lease until that fails for longer than the lease duration or someone else holds
/// it; returns why leadership is lost (the caller stops working).
pub async fn hold(client: &Client, cfg: &LeaseConfig) -> LeaderError {
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(cfg.renew_every).await;
        match try_hold(client, cfg).await {
            Ok(true) => last_ok = tokio::time::Instant::now(),
            Ok(false) => {
                let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
                let holder = api
                    .get_opt(&cfg.name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|l| l.spec?.holder_identity)
                    .unwrap_or_default();
                if holder != cfg.identity {
                    return LeaderError::Lost(cfg.name.clone(), holder);
                }
            }
            Err(e) if last_ok.elapsed() >= cfg.duration => return e,
            Err(e) => warn!("renewing: {e}"),
        }
    }
}

/// Gives the Lease up (on shutdown) so a successor need not wait for it to expire.
pub async fn release(client: &Client, cfg: &LeaseConfig) -> Result<(), LeaderError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let err = |e| LeaderError::Api(format!("{}/{}", cfg.namespace, cfg.name), e);
    let Some(mut lease) = api.get_opt(&cfg.name).await.map_err(err)? else {
        return Ok(());
    };
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(());
    };
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    api.replace(&cfg.name, &PostParams::default(), &lease)
        .await
        .map_err(err)?;
    info!(lease = %cfg.name, "released");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn spec(holder: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(at(renewed))),
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_lease_is_created_and_ours_is_renewed() {
        assert_eq!(decide(None, "a", at(0)), LeaseDecision::Create);
        assert_eq!(
            decide(Some(&spec("a", 0)), "a", at(100)),
            LeaseDecision::Renew
        );
    }

    #[test]
    fn another_holder_keeps_it_for_the_lease_duration_after_renewing() {
        assert_eq!(
            decide(Some(&spec("b", 0)), "a", at(14)),
            LeaseDecision::Wait(at(15))
        );
        assert_eq!(
            decide(Some(&spec("b", 0)), "a", at(15)),
            LeaseDecision::TakeOver
        );
    }

    #[test]
    fn a_released_lease_is_free_at_once() {
        let mut released = spec("b", 0);
        released.holder_identity = None;
        assert_eq!(decide(Some(&released), "a", at(1)), LeaseDecision::TakeOver);
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let cfg = LeaseConfig::new("ns", "a");
        let mut theirs = spec("b", 0);
        theirs.lease_transitions = Some(3);
        assert_eq!(
            held_by(&cfg, Some(&theirs), at(20)).lease_transitions,
            Some(4)
        );
        let ours = held_by(&cfg, Some(&theirs), at(20));
        let renewed = held_by(&cfg, Some(&ours), at(25));
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(renewed.acquire_time, ours.acquire_time);
        assert_eq!(renewed.renew_time, Some(MicroTime(at(25))));
    }
}
