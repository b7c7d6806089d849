//! A flow recorded in its objects starts at most 512 object runs at once, as
//! docs/bound-flows.md#limits says (`bind::in_object::tasks::CAP`): past it the
//! objects wait as names in the flow's queue, and start as runs end. Seen as a user sees it: a
//! run still going after 2 s shows `status.phase: Creating` on its object; an object whose run
//! has not started shows no phase.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use crate::common::bound::*;
use crate::common::{apply, create_flow, grant, wait_status};

/// The most runs of one flow going at once, as documented (not read from the controller: the
/// test holds it to the number users are told).
const CAP: usize = 512;

/// Objects created: more than a flow may run at once.
const OBJECTS: usize = CAP + 18;

/// A flow over widgets, recorded in them, whose one object run waits for ConfigMap `go`
/// (absent until the test creates it), then makes ConfigMap `<widget>-made`.
fn waiting_flow() -> Value {
    json!({
        "serviceAccountName": "flow",
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "record": "Object"},
        "steps": [
            {"type": "waitFor", "name": "go", "resource": {"kind": "ConfigMap", "name": "go"},
                "condition": "Exist", "timeoutSeconds": 600},
            {"type": "apply", "name": "made", "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-made\n"}
        ]
    })
}

/// The widgets of `ns` counted by their `status.phase` (`""`: none yet).
async fn phases(client: &kube::Client, ns: &str) -> BTreeMap<String, usize> {
    let list = widgets(client, ns).list(&Default::default()).await.unwrap();
    let mut out = BTreeMap::new();
    for w in list.items {
        let phase = w.data["status"]["phase"].as_str().unwrap_or_default();
        *out.entry(phase.to_string()).or_insert(0) += 1;
    }
    out
}

/// Polls the widgets' phases every 500 ms until `done` holds for them, or `secs`; fails as
/// soon as more than [`CAP`] show `Creating`. Returns the last count.
async fn watch_phases(
    client: &kube::Client,
    ns: &str,
    (secs, what): (u64, &str),
    done: impl Fn(&BTreeMap<String, usize>) -> bool,
) -> BTreeMap<String, usize> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let now = phases(client, ns).await;
        let creating = now.get("Creating").copied().unwrap_or(0);
        assert!(
            creating <= CAP,
            "{creating} runs going at once, more than {CAP}: {now:?}"
        );
        if done(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {secs}s: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_runs_at_most_its_cap_of_objects_at_once_and_the_rest_start_as_runs_end() {
    let (client, ns) = setup("inobj-cap", all_verbs()).await;
    // The wait is a watch of ConfigMaps, as the flow's ServiceAccount.
    grant(
        &client,
        &ns,
        &ns,
        "configmaps",
        json!(["get", "list", "watch"]),
    )
    .await;
    create_flow(&client, &ns, "widgets", waiting_flow()).await;
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let (client, ns) = (&client, &ns);
            async move { create_widget(client, ns, &format!("w{i}"), json!({})).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;

    // Every run the flow may start is going (each shows Creating), the others wait unstarted:
    // and it stays so (a started one never ends while `go` is absent, so no other starts).
    let full = |p: &BTreeMap<String, usize>| p.get("Creating") == Some(&CAP);
    let held = watch_phases(&client, &ns, (60, "the cap's runs going"), full).await;
    assert_eq!(held.get("").copied(), Some(OBJECTS - CAP), "{held:?}");
    let until = Instant::now() + Duration::from_secs(5);
    watch_phases(&client, &ns, (10, "held"), |_| Instant::now() > until).await;
    let still = phases(&client, &ns).await;
    assert_eq!(still, held, "nothing more started while every run waits");
    // The flow's summary counts the runs started, not the objects waiting for one.
    let summary = wait_status(&client, &ns, "widgets", 30, "the cap summed up", |s| {
        s["bound"]["creating"] == CAP
    })
    .await;
    assert_eq!(summary["bound"]["running"], 0, "{summary:#}");

    // `go` comes: the runs end, the waiting objects start in their place, and all are served.
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "go", "namespace": ns}}),
    )
    .await;
    let all = |p: &BTreeMap<String, usize>| p.get("Running") == Some(&OBJECTS);
    watch_phases(&client, &ns, (90, "every object served"), all).await;
    let summed = wait_status(&client, &ns, "widgets", 30, "all summed up", |s| {
        s["bound"]["running"] == OBJECTS
    })
    .await;
    assert_eq!(summed["bound"]["objects"], OBJECTS, "{summed:#}");
    for i in [0, OBJECTS / 2, OBJECTS - 1] {
        let made = format!("w{i}-made");
        assert!(config_map_exists(&client, &ns, &made).await, "{made}");
    }
}
