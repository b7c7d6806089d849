//! A bound flow's revisions (docs/bound-flows.md#revisions), on testenv, with the controller
//! holding the chart's ClusterRole only (so the chart must grant it ControllerRevisions): each
//! change of its steps makes a ControllerRevision owned by the flow, numbered up; an edit that
//! changes no step (a label, the selector) makes none; each object's record (its served mark,
//! or its child flow) names the revision that last served it; `status.bound` counts objects per
//! revision; the history limit prunes the oldest revision no object is served by; going back to
//! an older spec numbers its revision newest instead of making one.

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use pseudoflow_controller::bind::child::child_name;
use pseudoflow_controller::bind::revision::{REVISION_ANNOTATION, REVISION_HASH_LABEL};
use pseudoflow_controller::bind::served::mark_key;
use serde_json::{json, Value};

use crate::common::bound::*;
use crate::common::{create_flow, eventually, flows, wait_status};

/// The widget flow, recorded as `record`, keeping one old revision; its `made` step writes
/// `rev` into the ConfigMap it makes, so each revision's steps differ.
fn flow(record: &str, rev: u32) -> Value {
    let mut f = widget_flow(json!({"record": record}));
    if record == "Object" {
        f.as_object_mut().unwrap().remove("onDelete");
    }
    f["rollout"] = json!({"revisionHistoryLimit": 1});
    f["steps"] = steps(rev);
    f
}

/// The widget flow's steps with `rev` in what the first one makes.
fn steps(rev: u32) -> Value {
    let mut steps = widget_flow(json!({}))["steps"].clone();
    let m = steps[0]["manifests"].as_str().unwrap().to_string();
    steps[0]["manifests"] = json!(format!("{m}  rev: \"{rev}\"\n"));
    steps
}

/// The flow's ControllerRevisions: (revision, name, hash label, whether the flow `uid` is
/// their controller), oldest first.
async fn revisions(client: &Client, ns: &str, uid: &str) -> Vec<(i64, String, String, bool)> {
    let api = Api::<ControllerRevision>::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels("ops.example.com/revision-of=widgets");
    let mut out: Vec<_> =
        api.list(&lp)
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|cr| {
                let m = cr.metadata;
                let owned =
                    m.owner_references.unwrap_or_default().iter().any(|o| {
                        o.uid == uid && o.controller == Some(true) && o.kind == "PseudoFlow"
                    });
                let hash = m.labels.unwrap_or_default()[REVISION_HASH_LABEL].clone();
                (cr.revision, m.name.unwrap_or_default(), hash, owned)
            })
            .collect();
    out.sort();
    out
}

/// The revision hash object `w`'s record names: its served mark's `v`, or its child's
/// annotation.
async fn recorded(client: &Client, ns: &str, record: &str, w: &str) -> Option<String> {
    if record == "Object" {
        let o = widgets(client, ns).get(w).await.unwrap();
        let a = o.metadata.annotations.unwrap_or_default();
        let mark: Value = serde_json::from_str(a.get(&mark_key(ns, "widgets"))?).ok()?;
        return mark["v"].as_str().map(String::from);
    }
    let child = flows(client, ns)
        .get_opt(&child_name("widgets", ns, w))
        .await;
    let a = child.unwrap()?.metadata.annotations.unwrap_or_default();
    a.get(REVISION_ANNOTATION).cloned()
}

/// Waits until revision `name` is current and serves both widgets (made with `rev`), and no
/// other revision serves any; returns the status.
async fn served_by(client: &Client, ns: &str, record: &str, name: &str, rev: u32) -> Value {
    for w in ["a", "b"] {
        eventually(90, &format!("widget {w} served by rev {rev}"), || async {
            let made = format!("{w}-made-one");
            let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns);
            let data = cm.get_opt(&made).await.unwrap().and_then(|c| c.data);
            data.is_some_and(|d| d.get("rev") == Some(&rev.to_string()))
        })
        .await;
    }
    let what = format!("both objects counted under {name}");
    let status = wait_status(client, ns, "widgets", 90, &what, |s| {
        let b = &s["bound"];
        b["currentRevision"] == name
            && b["revisions"].as_array().is_some_and(|r| {
                r.iter().all(|c| c["name"] == name || c["objects"] == 0)
                    && r.iter().any(|c| c["name"] == name && c["objects"] == 2)
            })
    })
    .await;
    let hash = name.rsplit('-').next().unwrap();
    for w in ["a", "b"] {
        eventually(30, &format!("widget {w}'s record names {name}"), || async {
            recorded(client, ns, record, w).await.as_deref() == Some(hash)
        })
        .await;
    }
    status
}

/// A namespace (`prefix`) with the widget flow recorded as `record` at its first steps and
/// widgets `a` and `b`, once its first revision is kept; the flow's uid.
async fn widgets_at_first_revision(prefix: &str, record: &str) -> (Client, String, String) {
    let (client, ns) = setup(prefix, all_verbs()).await;
    create_flow(&client, &ns, "widgets", flow(record, 1)).await;
    let uid = flows(&client, &ns)
        .get("widgets")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    create_widget(&client, &ns, "a", json!({"version": "one"})).await;
    create_widget(&client, &ns, "b", json!({"version": "one"})).await;
    eventually(60, "the first revision", || async {
        revisions(&client, &ns, &uid).await.len() == 1
    })
    .await;
    (client, ns, uid)
}

async fn each_change_of_steps_is_a_revision(record: &str) {
    let prefix = format!("rev-{}", record.to_lowercase());
    let (client, ns, uid) = widgets_at_first_revision(&prefix, record).await;
    let first = revisions(&client, &ns, &uid).await;
    let (n1, name1, hash1, owned) = first[0].clone();
    assert_eq!((n1, owned), (1, true), "{first:?}");
    assert_eq!(name1, format!("widgets-{hash1}"));
    let st = served_by(&client, &ns, record, &name1, 1).await;
    assert_eq!(
        st["bound"]["revisions"],
        json!([{"revision": 1, "name": name1, "objects": 2}])
    );

    // A change of steps: revision 2, serving both objects.
    let change = |rev: u32| json!({"spec": {"steps": steps(rev)}});
    let pp = PatchParams::default();
    flows(&client, &ns)
        .patch("widgets", &pp, &Patch::Merge(&change(2)))
        .await
        .unwrap();
    eventually(60, "the second revision", || async {
        revisions(&client, &ns, &uid).await.len() == 2
    })
    .await;
    let second = revisions(&client, &ns, &uid).await;
    assert_eq!(second[0], first[0], "the first is kept, unchanged");
    let (n2, name2, _, owned) = second[1].clone();
    assert_eq!((n2, owned), (2, true), "{second:?}");
    served_by(&client, &ns, record, &name2, 2).await;

    // A label and a selector that still picks both change no step: no new revision, though
    // the flow's generation moved (its objects run again, with revision 2).
    let same = json!({"metadata": {"labels": {"team": "x"}},
        "spec": {"bind": {"selector": "tier!=none"}}});
    let f = flows(&client, &ns)
        .patch("widgets", &pp, &Patch::Merge(&same))
        .await
        .unwrap();
    let generation = f.metadata.generation.unwrap();
    wait_status(&client, &ns, "widgets", 60, "the edit observed", |s| {
        s["observedGeneration"].as_i64() >= Some(generation)
            && s["bound"]["currentRevision"] == name2
    })
    .await;
    assert_eq!(
        revisions(&client, &ns, &uid).await,
        second,
        "no new revision"
    );

    // A second change of steps: revision 3; with a history limit of 1, revision 1 (serving no
    // object) is pruned and revision 2 stays.
    flows(&client, &ns)
        .patch("widgets", &pp, &Patch::Merge(&change(3)))
        .await
        .unwrap();
    eventually(60, "the third revision", || async {
        revisions(&client, &ns, &uid).await.iter().any(|r| r.0 == 3)
    })
    .await;
    let name3 = revisions(&client, &ns, &uid)
        .await
        .last()
        .unwrap()
        .1
        .clone();
    let st = served_by(&client, &ns, record, &name3, 3).await;
    eventually(60, "revision 1 pruned", || async {
        let numbers: Vec<i64> = revisions(&client, &ns, &uid)
            .await
            .iter()
            .map(|r| r.0)
            .collect();
        numbers == [2, 3]
    })
    .await;
    let now = revisions(&client, &ns, &uid).await;
    assert_eq!(now[0], second[1], "revision 2 kept as it was");
    assert!(now.iter().all(|r| r.3), "{now:?}");
    let counts = st["bound"]["revisions"].as_array().unwrap();
    assert_eq!(
        counts[0],
        json!({"revision": 3, "name": name3, "objects": 2}),
        "{st:#}"
    );

    // Back to revision 2's steps: no new revision, revision 2 is numbered newest (4), as a
    // DaemonSet's is, and serves both objects again.
    let f = flows(&client, &ns);
    f.patch("widgets", &pp, &Patch::Merge(&change(2)))
        .await
        .unwrap();
    eventually(60, "revision 2 renumbered 4", || async {
        let now = revisions(&client, &ns, &uid).await;
        let numbered: Vec<(i64, String)> = now.iter().map(|r| (r.0, r.1.clone())).collect();
        numbered == [(3, name3.clone()), (4, name2.clone())]
    })
    .await;
    served_by(&client, &ns, record, &name2, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_of_a_flow_recorded_in_its_objects() {
    each_change_of_steps_is_a_revision("Object").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_of_a_flow_recorded_in_child_flows() {
    each_change_of_steps_is_a_revision("Child").await;
}

/// Attack: whoever may write ControllerRevisions in the flow's namespace deletes one of its
/// revisions and plants, under that name, one naming the flow as its controller, labelled for
/// it, with steps of their own in its data. When the flow goes back to that revision's steps,
/// the planted one is not taken (nor renumbered, nor pruned): a `RevisionRefused` Warning, no
/// current revision in the status, and the objects are still served with the flow's own steps,
/// their records naming the hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_revision_planted_under_its_name_is_not_taken() {
    let (client, ns, uid) = widgets_at_first_revision("rev-planted", "Object").await;
    let (_, name1, hash1, _) = revisions(&client, &ns, &uid).await[0].clone();
    served_by(&client, &ns, "Object", &name1, 1).await;
    let pp = PatchParams::default();
    let change = |rev: u32| json!({"spec": {"steps": steps(rev)}});
    let f = flows(&client, &ns);
    f.patch("widgets", &pp, &Patch::Merge(&change(2)))
        .await
        .unwrap();
    eventually(60, "the second revision", || async {
        revisions(&client, &ns, &uid).await.len() == 2
    })
    .await;

    let crs = Api::<ControllerRevision>::namespaced(client.clone(), &ns);
    crs.delete(&name1, &Default::default()).await.unwrap();
    eventually(30, "revision 1 gone", || async {
        crs.get_opt(&name1).await.unwrap().is_none()
    })
    .await;
    let evil = json!({"spec": {"serviceAccountName": "flow",
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "record": "Object"},
        "steps": [{"type": "log", "message": "evil"}]}});
    let planted: ControllerRevision = serde_json::from_value(json!({
        "metadata": {"name": name1, "labels": {
            "ops.example.com/revision-of": "widgets", REVISION_HASH_LABEL: hash1},
            "ownerReferences": [{"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
                "name": "widgets", "uid": uid, "controller": true}]},
        "data": evil, "revision": 99}))
    .unwrap();
    crs.create(&Default::default(), &planted).await.unwrap();

    f.patch("widgets", &pp, &Patch::Merge(&change(1)))
        .await
        .unwrap();
    eventually(60, "RevisionRefused told", || async {
        let events = crate::common::flow_events(&client, &ns, "widgets").await;
        events.iter().any(|e| {
            e.reason.as_deref() == Some("RevisionRefused")
                && e.message.as_deref().unwrap_or_default().contains(&name1)
        })
    })
    .await;
    for w in ["a", "b"] {
        eventually(
            90,
            &format!("widget {w} served with the flow's own steps"),
            || async {
                let cm =
                    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
                let made = cm.get_opt(&format!("{w}-made-one")).await.unwrap();
                let data = made.and_then(|c| c.data).unwrap_or_default();
                data.get("rev").map(String::as_str) == Some("1")
                    && recorded(&client, &ns, "Object", w).await.as_deref() == Some(&hash1)
            },
        )
        .await;
    }
    let what = "both served, no revision current (the planted one is not the flow's)";
    wait_status(&client, &ns, "widgets", 60, what, |s| {
        s["bound"]["running"] == 2 && s["bound"].get("currentRevision").is_none()
    })
    .await;
    let kept = crs.get(&name1).await.unwrap();
    assert_eq!(kept.revision, 99, "not renumbered");
    assert_eq!(kept.data.unwrap().0, evil, "not touched");
    let ours: Vec<i64> = revisions(&client, &ns, &uid)
        .await
        .iter()
        .map(|r| r.0)
        .collect();
    assert!(
        ours.contains(&2),
        "the flow's own revision 2 is kept: {ours:?}"
    );
}
