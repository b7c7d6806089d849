//! A bound flow's new revision reaching its objects in waves (`spec.rollout.waves`,
//! docs/bound-flows.md#rollouts), on testenv, with 20 widgets and waves `[1, "50%"]`, under
//! both ways of recording (`record: Object`, `record: Child`): a revision whose step fails
//! stops after the first wave (one object ran it, 19 keep the old revision's result and their
//! records name the old revision, the status and a `RolloutStopped` Warning name the failing
//! object and the revision); while it is stopped, an object not reached that changes runs
//! with its own (old) revision and one created then gets the previous revision, and an object
//! deleted leaves the count; a good revision then goes through every wave, in name order (what
//! each object's run wrote says so), to `Completed`.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pseudoflow_controller::bind::child::child_name;
use pseudoflow_controller::bind::revision::REVISION_ANNOTATION;
use pseudoflow_controller::bind::served::{mark_key, Mark, Sealer};
use serde_json::{json, Value};

use crate::common::bound::*;
use crate::common::{create_flow, eventually, flow_events, flows, wait_status};

/// Widgets in the test.
const WIDGETS: usize = 20;

fn widget_name(i: usize) -> String {
    format!("w-{i:02}")
}

/// The step of revision `rev`: ConfigMap `<widget>-rev<rev>` holding `rev` and the widget's
/// `spec.version`.
fn step(rev: u32) -> Value {
    json!({"type": "apply", "name": "rev", "manifests": format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${{object.metadata.name}}-rev{rev}\ndata:\n  rev: \"{rev}\"\n  version: ${{object.spec.version}}\n")})
}

/// The `version` ConfigMap `name` holds (None: no such ConfigMap).
async fn version_in(client: &Client, ns: &str, name: &str) -> Option<String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let data = cm.get_opt(name).await.unwrap()?.data.unwrap_or_default();
    data.get("version").cloned()
}

/// Revision `rev`'s steps: its step, then (`fails`) one that always fails (a ConfigMap name
/// the API server refuses).
fn steps(rev: u32, fails: bool) -> Value {
    let mut s = vec![step(rev)];
    if fails {
        s.push(json!({"type": "apply", "name": "broken", "manifests":
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-NOT-A-NAME\n"}));
    }
    json!(s)
}

/// The widget flow recorded as `record`, rolled out in waves of 1, then half, then all.
fn flow(record: &str, rev: u32) -> Value {
    let mut f = widget_flow(json!({ "record": record }));
    f.as_object_mut().unwrap().remove("onDelete");
    f["rollout"] = json!({"waves": [1, "50%"]});
    f["steps"] = steps(rev, false);
    f
}

/// The resourceVersion of ConfigMap `name` (None: none).
async fn written(client: &Client, ns: &str, name: &str) -> Option<u64> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let c = cm.get_opt(name).await.unwrap()?;
    c.metadata.resource_version?.parse().ok()
}

/// How many widgets have ConfigMap `<widget>-rev<rev>`.
async fn ran(client: &Client, ns: &str, rev: u32) -> usize {
    let mut n = 0;
    for i in 0..WIDGETS {
        let name = format!("{}-rev{rev}", widget_name(i));
        n += usize::from(written(client, ns, &name).await.is_some());
    }
    n
}

/// The revision hash each widget's record names (its served mark, or its child flow), in name
/// order.
async fn recorded(client: &Client, ns: &str, record: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for i in 0..WIDGETS {
        if record == "Child" {
            let child = child_name("widgets", ns, &widget_name(i));
            let c = flows(client, ns).get(&child).await.unwrap();
            let a = c.metadata.annotations.unwrap_or_default();
            out.push(a.get(REVISION_ANNOTATION).cloned());
            continue;
        }
        let w = widgets(client, ns).get(&widget_name(i)).await.unwrap();
        let a = w.metadata.annotations.unwrap_or_default();
        let mark: Option<Value> = a
            .get(&mark_key(ns, "widgets"))
            .and_then(|m| serde_json::from_str(m).ok());
        out.push(mark.and_then(|m| m["v"].as_str().map(String::from)));
    }
    out
}

/// Changes the flow's steps; returns its new current revision (name) once the status names it.
async fn roll(client: &Client, ns: &str, steps: Value) -> String {
    let f = flows(client, ns)
        .patch(
            "widgets",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"steps": steps}})),
        )
        .await
        .unwrap();
    let generation = f.metadata.generation.unwrap();
    let st = wait_status(client, ns, "widgets", 60, "the new revision", |s| {
        s["observedGeneration"].as_i64() >= Some(generation)
            && s["bound"]["rollout"]["revision"] == s["bound"]["currentRevision"]
    })
    .await;
    st["bound"]["currentRevision"].as_str().unwrap().to_string()
}

/// The notes of the flow's Events of `reason`.
async fn told(client: &Client, ns: &str, reason: &str) -> Vec<String> {
    let events = flow_events(client, ns, "widgets").await;
    let of = events
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason));
    of.filter_map(|e| e.message).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waves_of_a_flow_recorded_in_its_objects() {
    a_failing_revision_stops_after_the_first_wave_and_a_good_one_goes_through_every_wave("Object")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waves_of_a_flow_recorded_in_child_flows() {
    a_failing_revision_stops_after_the_first_wave_and_a_good_one_goes_through_every_wave("Child")
        .await;
}

async fn a_failing_revision_stops_after_the_first_wave_and_a_good_one_goes_through_every_wave(
    record: &str,
) {
    let prefix = format!("rollout-{}", record.to_lowercase());
    let (client, ns) = setup(&prefix, all_verbs()).await;
    create_flow(&client, &ns, "widgets", flow(record, 1)).await;
    for i in 0..WIDGETS {
        create_widget(&client, &ns, &widget_name(i), json!({"version": "one"})).await;
    }
    let st = wait_status(&client, &ns, "widgets", 120, "revision 1 everywhere", |s| {
        s["bound"]["rollout"]["phase"] == "Completed" && s["bound"]["rollout"]["updated"] == 20
    })
    .await;
    let first = st["bound"]["currentRevision"].as_str().unwrap().to_string();
    assert_eq!(ran(&client, &ns, 1).await, WIDGETS);
    let hash = |name: &str| Some(name.rsplit('-').next().unwrap().to_string());

    // (a) Revision 2 fails: the first wave (w-00, first by name) ran it, and the rollout
    // stopped there, naming it.
    let second = roll(&client, &ns, steps(2, true)).await;
    let st = wait_status(&client, &ns, "widgets", 90, "the rollout stopped", |s| {
        s["bound"]["rollout"]["phase"] == "Stopped"
    })
    .await;
    let r = &st["bound"]["rollout"];
    let failing = format!("{ns}/w-00");
    assert_eq!(r["revision"], second, "{st:#}");
    assert_eq!(r["from"], first, "{st:#}");
    assert_eq!(
        (r["wave"].as_u64(), r["target"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(r["failedObjects"], json!([failing]), "{st:#}");
    eventually(
        30,
        "a RolloutStopped Warning naming w-00 and the revision",
        || async {
            told(&client, &ns, "RolloutStopped")
                .await
                .iter()
                .any(|n| n.contains(&failing) && n.contains(&second))
        },
    )
    .await;
    // It stays stopped (its retries fail too): the 19 others keep revision 1's result.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(ran(&client, &ns, 2).await, 1, "one object ran revision 2");
    assert!(written(&client, &ns, "w-00-rev2").await.is_some());
    let marks = recorded(&client, &ns, record).await;
    assert_eq!(marks[0], hash(&second));
    assert!(marks[1..].iter().all(|m| *m == hash(&first)), "{marks:?}");
    let st = wait_status(&client, &ns, "widgets", 5, "still stopped", |s| {
        s["bound"]["rollout"]["phase"] == "Stopped"
    })
    .await;
    assert_eq!(st["bound"]["rollout"]["updated"], 0);

    // While it is stopped, an object not reached that changes runs with its own revision (1,
    // read back from its ControllerRevision), and one created now with the previous revision.
    create_widget(&client, &ns, "w-05", json!({"version": "two"})).await;
    create_widget(&client, &ns, "z-new", json!({"version": "one"})).await;
    eventually(60, "w-05 run again with revision 1", || async {
        version_in(&client, &ns, "w-05-rev1").await.as_deref() == Some("two")
    })
    .await;
    eventually(60, "z-new served with revision 1", || async {
        version_in(&client, &ns, "z-new-rev1").await.as_deref() == Some("one")
    })
    .await;
    assert_eq!(version_in(&client, &ns, "w-05-rev2").await, None);
    assert_eq!(version_in(&client, &ns, "z-new-rev2").await, None);
    assert_eq!(recorded(&client, &ns, record).await[5], hash(&first));
    // Gone again before the next revision (whose waves the test counts in 20 objects).
    widgets(&client, &ns)
        .delete("z-new", &Default::default())
        .await
        .unwrap();
    wait_status(&client, &ns, "widgets", 60, "z-new gone", |s| {
        s["bound"]["objects"] == 20 && s["bound"]["rollout"]["phase"] == "Stopped"
    })
    .await;

    // (b) Revision 3 is good: it goes through every wave to Completed, all 20 on it.
    let third = roll(&client, &ns, steps(3, false)).await;
    let st = wait_status(&client, &ns, "widgets", 120, "revision 3 everywhere", |s| {
        let r = &s["bound"]["rollout"];
        r["revision"] == third && r["phase"] == "Completed" && r["updated"] == 20
    })
    .await;
    let r = &st["bound"]["rollout"];
    assert_eq!(
        (r["wave"].as_u64(), r["waves"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(r["from"], second);
    assert_eq!(ran(&client, &ns, 3).await, WIDGETS);
    let marks = recorded(&client, &ns, record).await;
    assert!(marks.iter().all(|m| *m == hash(&third)), "{marks:?}");
    // In waves, in name order: w-00 wrote before any other, w-01..w-09 before w-10..w-19 (a
    // wave starts only once the one before is recorded; resourceVersions order the writes).
    let mut at = Vec::new();
    for i in 0..WIDGETS {
        let name = format!("{}-rev3", widget_name(i));
        at.push(written(&client, &ns, &name).await.unwrap());
    }
    let (w1, w2, w3) = (&at[..1], &at[1..10], &at[10..]);
    assert!(w1.iter().max() < w2.iter().min(), "{at:?}");
    assert!(w2.iter().max() < w3.iter().min(), "{at:?}");
    // The reconcile that starts a wave sums up after it (the full pass after the change
    // always does): a wave of revision 3 is told, which one depends on how fast runs end.
    let waves = told(&client, &ns, "RolloutWave").await;
    assert!(waves.iter().any(|n| n.contains(&third)), "{waves:?}");
    assert!(
        waves.iter().all(|n| !n.contains(&first)),
        "no wave for a first revision (nothing to keep): {waves:?}"
    );
    let done = told(&client, &ns, "RolloutCompleted").await;
    assert!(done.iter().any(|n| n.contains(&third)), "{done:?}");
    assert!(
        told(&client, &ns, "RolloutStopped")
            .await
            .iter()
            .all(|n| !n.contains(&third)),
        "revision 3 never stopped"
    );
}

/// Attack: someone who may create ControllerRevisions in the flow's namespace and write objects
/// of the bound kind plants a revision of their own (owned by the flow, labelled for it, its
/// hash label consistent with its data) and points a widget's served mark at it while a
/// rollout is stopped, so that the widget, not reached by the rollout, would be served with
/// the planted steps as the flow's ServiceAccount. The controller trusts only the revisions it
/// sealed: the widget runs with the revision before the rollout's, and the planted steps never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_planted_revision_named_by_an_objects_mark_is_never_served() {
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use pseudoflow_controller::bind::revision;

    let key = pseudoflow_controller::approval::Key::new("r".repeat(32)).unwrap();
    let (client, ns) = setup_with_key("rollout-plant", all_verbs(), &key).await;
    let mut f = flow("Object", 1);
    f["rollout"] = json!({"waves": [1]});
    create_flow(&client, &ns, "widgets", f.clone()).await;
    let uid = flows(&client, &ns)
        .get("widgets")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    for w in ["a", "b"] {
        create_widget(&client, &ns, w, json!({"version": "one"})).await;
    }
    eventually(60, "both served by revision 1", || async {
        version_in(&client, &ns, "a-rev1").await.is_some()
            && version_in(&client, &ns, "b-rev1").await.is_some()
    })
    .await;

    let mut planted = f.clone();
    planted["steps"] = json!([{"type": "apply", "manifests":
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.metadata.name}-planted\n"}]);
    let h = revision::hash(&planted);
    let cr: ControllerRevision = serde_json::from_value(json!({
        "metadata": {"name": revision::name("widgets", &h), "namespace": ns,
            "labels": {revision::REVISION_OF_LABEL: "widgets", revision::REVISION_HASH_LABEL: h},
            "ownerReferences": [{"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
                "name": "widgets", "uid": uid, "controller": true}]},
        "data": revision::data(&planted), "revision": 99}))
    .unwrap();
    Api::<ControllerRevision>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &cr)
        .await
        .unwrap();

    // Revision 2 fails on `a`, the first wave: the rollout stops before `b`.
    roll(&client, &ns, steps(2, true)).await;
    wait_status(&client, &ns, "widgets", 60, "the rollout stopped", |s| {
        s["bound"]["rollout"]["phase"] == "Stopped"
    })
    .await;

    // `b`'s mark now names the planted revision, and `b` changes.
    let b = widgets(&client, &ns).get("b").await.unwrap();
    let key_of_mark = mark_key(&ns, "widgets");
    let mark = b.metadata.annotations.unwrap_or_default()[&key_of_mark].clone();
    let mut mark: Value = serde_json::from_str(&mark).unwrap();
    mark["v"] = json!(h);
    // Sealed with the controller's key, as if the mark's own seal (`bind/served/seal.rs`,
    // tested in `sealed_mark.rs`) were beaten: the revision's seal alone must stop it.
    let mark: Mark = serde_json::from_value(mark).unwrap();
    let sealer = Sealer {
        key: Some(&key),
        flow: (&ns, "widgets"),
    };
    let patch = json!({"metadata": {"annotations": {key_of_mark: sealer.seal(&mark)}},
        "spec": {"version": "two"}});
    widgets(&client, &ns)
        .patch("b", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually(60, "b served again, with revision 1", || async {
        version_in(&client, &ns, "b-rev1").await.as_deref() == Some("two")
    })
    .await;
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    assert!(
        cm.get_opt("b-planted").await.unwrap().is_none(),
        "the planted revision's steps ran"
    );
}
