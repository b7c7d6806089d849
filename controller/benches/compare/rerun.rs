//! Benchmark 5b (issue #34, bounded history): after section 5, every object's spec is changed
//! `PSEUDOFLOW_BENCH_BOUND_RERUNS` (3) times, each change a new run of its child flow, and the
//! objects left in the namespace are counted. Each child keeps the objects of at most
//! `successfulRunsHistoryLimit` (3) succeeded and `failedRunsHistoryLimit` (1) failed runs, so
//! the counts stay what one object's few runs leave, times the objects, however many re-runs.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;
use pseudoflow_controller::flow::flow_resource;
use pseudoflow_test_support::TestKind;
use serde_json::json;

use crate::common::{self, Row};

/// Whether the object's Ready condition is True for its current generation (its newest run
/// ended well and was written back).
fn ready_now(o: &DynamicObject) -> bool {
    let generation = o.metadata.generation.unwrap_or_default();
    o.data["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter().any(|c| {
            c["type"] == "Ready"
                && c["status"] == "True"
                && c["observedGeneration"].as_i64() == Some(generation)
        })
    })
}

/// How many objects of kind `K` are in `ns`.
async fn count<K>(client: &Client, ns: &str) -> usize
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items
        .len()
}

/// The objects left in `ns`, as `Jobs 0, pods 0, ...`.
async fn left(client: &Client, ns: &str) -> String {
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &flow_resource());
    let children = flows
        .list_metadata(&ListParams::default().labels("ops.example.com/bound-to"))
        .await
        .unwrap()
        .items
        .len();
    format!(
        "Jobs {}, pods {}, Secrets {}, ConfigMaps {}, child PseudoFlows {children}",
        count::<Job>(client, ns).await,
        count::<Pod>(client, ns).await,
        count::<Secret>(client, ns).await,
        count::<ConfigMap>(client, ns).await,
    )
}

/// Re-runs each of the `objects` Gadgets of `ns` `rounds` times (a spec change each, all
/// objects at once, waiting for all to be Ready again), then counts what is left.
pub async fn run(
    client: &Client,
    ns: &str,
    objects: usize,
    rounds: usize,
    timeout: Duration,
) -> Row {
    let gadgets = TestKind::new(crate::bound::GROUP, "Gadget");
    let api = gadgets.api(client, ns);
    let before = left(client, ns).await;
    let t = Instant::now();
    for round in 1..=rounds {
        common::apply_all(
            client,
            (0..objects).map(|i| {
                gadgets.object(
                    ns,
                    &format!("g{i}"),
                    json!({"size": format!("{i}Gi-{round}")}),
                )
            }),
        )
        .await;
        loop {
            let list = api.list(&ListParams::default()).await.unwrap().items;
            let ready = list.iter().filter(|o| ready_now(o)).count();
            if ready == objects {
                break;
            }
            assert!(
                t.elapsed() < timeout,
                "re-run {round}: {ready}/{objects} Ready after {}",
                common::secs(t.elapsed())
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        println!(
            "bound: re-run {round} of {objects} objects done at {}",
            common::secs(t.elapsed())
        );
    }
    // The last runs' pruning is done as each run ends; give the last ones a moment.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = left(client, ns).await;
    println!("bound: objects left after {rounds} re-runs of {objects} objects: {after}");
    Row {
        workload: format!("5b. the {objects} objects each re-run {rounds} times (bounded history)"),
        driver: "PseudoFlow".into(),
        wall: common::secs(t.elapsed()),
        jobs: "-".into(),
        ratio: "-".into(),
        notes: format!(
            "objects left in the namespace after the re-runs: {after} (after the first runs: {before}); history limits 3 succeeded, 1 failed per child"
        ),
    }
}
