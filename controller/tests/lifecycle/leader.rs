//! Leader election against the real API server (testenv): of two candidates only one holds the
//! Lease; the other takes over once it is released, or once the holder stops renewing for a
//! lease duration — never both at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use pseudoflow_controller::leader::{acquire, release, try_hold, LeaseConfig};

fn fast(ns: &str, identity: &str) -> LeaseConfig {
    let mut cfg = LeaseConfig::new(ns, identity);
    cfg.duration = Duration::from_secs(3);
    cfg.renew_every = Duration::from_secs(1);
    cfg.retry_every = Duration::from_millis(200);
    cfg
}

async fn holder(client: &kube::Client, ns: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get("pseudoflow-controller")
        .await
        .unwrap()
        .spec?
        .holder_identity
}

#[tokio::test]
async fn one_leader_at_a_time_and_a_fast_handover() {
    let env = crate::common::env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("leader").await.unwrap();
    let (a, b) = (fast(&ns, "a"), fast(&ns, "b"));

    acquire(&client, &a).await.unwrap();
    assert_eq!(holder(&client, &ns).await.as_deref(), Some("a"));
    // b cannot take a Lease a keeps renewing.
    for _ in 0..3 {
        assert!(try_hold(&client, &a).await.unwrap(), "a renews");
        assert!(!try_hold(&client, &b).await.unwrap(), "b must wait");
    }
    // Released on shutdown: b takes over without waiting for expiry.
    release(&client, &a).await.unwrap();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(2), acquire(&client, &b))
        .await
        .expect("b acquires a released lease at once")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(holder(&client, &ns).await.as_deref(), Some("b"));
    assert!(
        !try_hold(&client, &a).await.unwrap(),
        "a is not leader any more"
    );

    // b stops renewing (crashed): a takes over once the lease duration passed, not before.
    let crashed = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), acquire(&client, &a))
        .await
        .expect("a takes over an expired lease")
        .unwrap();
    let waited = crashed.elapsed();
    assert!(
        waited >= Duration::from_secs(2),
        "took over after {waited:?}, before the 3 s lease ran out"
    );
    assert_eq!(holder(&client, &ns).await.as_deref(), Some("a"));
    let lease = Api::<Lease>::namespaced(client.clone(), &ns)
        .get("pseudoflow-controller")
        .await
        .unwrap();
    assert_eq!(lease.spec.unwrap().lease_transitions, Some(3));
}
