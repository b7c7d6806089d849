//! A person's `kubectl pf rollout` actions reaching the rollout engine end to end (issue #44):
//! the real controller, holding the approval key, and both webhooks on testenv. Widgets bound to
//! a flow recorded in them (`record: Object`, waves `[1, "50%"]`): revision 2 starts, a user with
//! the `rollout` verb pauses it (no further widget gets it), then promotes it (every widget gets
//! it), then undoes it: every widget is served with revision 1 again (what its steps write, and
//! each served mark's revision), and the status says so, naming who asked.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pseudoflow_controller::approval::Key;
use pseudoflow_controller::bind::served::mark_key;
use serde_json::{json, Value};

use crate::common::admission::{editor_and_approver, start_webhooks};
use crate::common::approval::{annotate, wait_webhooks_active_on};
use crate::common::bound::*;
use crate::common::{apply, create_flow, flows, wait_status};

/// Widgets in the test (waves of 1, 10, then 20), as issue #44 asks.
const WIDGETS: usize = 20;

fn widget_name(i: usize) -> String {
    format!("w-{i:02}")
}

/// Revision `rev`'s steps: ConfigMap `<widget>-result` holding `rev`.
fn steps(rev: u32) -> Value {
    json!([{"type": "apply", "name": "result", "manifests": format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${{object.metadata.name}}-result\ndata:\n  rev: \"{rev}\"\n")}])
}

/// The widget flow recorded in its objects, with revision `rev`'s steps, rolled out in waves
/// of 1, then half, then all; each wave waits 10 s after the one before (time to pause it).
fn flow(rev: u32) -> Value {
    let mut f = widget_flow(json!({"record": "Object"}));
    f.as_object_mut().unwrap().remove("onDelete");
    f["rollout"] = json!({"waves": [1, "50%"], "minReadySeconds": 10});
    f["steps"] = steps(rev);
    f
}

/// What each widget's ConfigMap says (`rev`; None: none yet), in name order.
async fn results(client: &Client, ns: &str) -> Vec<Option<String>> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for i in 0..WIDGETS {
        let name = format!("{}-result", widget_name(i));
        let c = cm.get_opt(&name).await.unwrap();
        out.push(c.and_then(|c| c.data?.get("rev").cloned()));
    }
    out
}

/// How many widgets' ConfigMaps say `rev`.
async fn on(client: &Client, ns: &str, rev: &str) -> usize {
    let all = results(client, ns).await;
    all.iter().filter(|r| r.as_deref() == Some(rev)).count()
}

/// The revision hash each widget's served mark names, in name order.
async fn marks(client: &Client, ns: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for i in 0..WIDGETS {
        let w = widgets(client, ns).get(&widget_name(i)).await.unwrap();
        let a = w.metadata.annotations.unwrap_or_default();
        let mark: Option<Value> = a
            .get(&mark_key(ns, "widgets"))
            .and_then(|m| serde_json::from_str(m).ok());
        out.push(mark.and_then(|m| m["v"].as_str().map(String::from)));
    }
    out
}

/// `boss` may also `rollout` flows in `ns` (`tenant` may only edit them).
async fn boss_may_rollout(client: &Client, ns: &str) {
    apply(client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "flow-roller", "namespace": ns},
        "rules": [{"apiGroups": ["ops.example.com"], "resources": ["pseudoflows"], "verbs": ["rollout"]}]}))
    .await;
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "rollers", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flow-roller"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "boss"}]}),
    )
    .await;
}

/// `kubectl annotate` as `boss`: `ops.example.com/rollout=<action>` (what `kubectl pf rollout
/// <action>` sets), admitted.
async fn ask(ns: &str, action: &str) {
    let what = format!("ops.example.com/rollout={action}");
    let (ok, out) = annotate(ns, "widgets", Some("boss"), &what).await;
    assert!(ok, "{action}: {out}");
}

/// The hash a revision name ends with (what a served mark's `v` names).
fn hash(name: &str) -> Option<String> {
    Some(name.rsplit('-').next().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_holds_a_wave_promote_completes_it_and_undo_brings_every_object_back_to_the_previous_revision(
) {
    let key = Key::random();
    let (client, ns) = setup_with_key("rollout-undo", all_verbs(), &key).await;
    editor_and_approver(&client, &ns).await;
    boss_may_rollout(&client, &ns).await;
    create_flow(&client, &ns, "widgets", flow(1)).await;
    start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active_on(&ns, "widgets").await;
    for i in 0..WIDGETS {
        create_widget(&client, &ns, &widget_name(i), json!({"version": "one"})).await;
    }
    let st = wait_status(&client, &ns, "widgets", 120, "revision 1 everywhere", |s| {
        s["bound"]["rollout"]["phase"] == "Completed" && s["bound"]["rollout"]["updated"] == WIDGETS
    })
    .await;
    let first = st["bound"]["currentRevision"].as_str().unwrap().to_string();
    assert_eq!(on(&client, &ns, "1").await, WIDGETS);

    // Revision 2 starts (its first wave, w-00); paused at once, no further widget gets it.
    let f = flows(&client, &ns)
        .patch(
            "widgets",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"steps": steps(2)}})),
        )
        .await
        .unwrap();
    let generation = f.metadata.generation.unwrap();
    let st = wait_status(&client, &ns, "widgets", 60, "revision 2 rolling out", |s| {
        s["observedGeneration"].as_i64() >= Some(generation)
            && s["bound"]["rollout"]["revision"] == s["bound"]["currentRevision"]
            && s["bound"]["rollout"]["revision"] != first.as_str()
    })
    .await;
    let second = st["bound"]["currentRevision"].as_str().unwrap().to_string();
    ask(&ns, "pause").await;
    let st = wait_status(&client, &ns, "widgets", 30, "the rollout paused", |s| {
        s["bound"]["rollout"]["phase"] == "Paused"
    })
    .await;
    let r = &st["bound"]["rollout"];
    assert_eq!(r["revision"], second, "{st:#}");
    assert_eq!(r["lastAction"]["action"], "pause", "{st:#}");
    assert_eq!(r["lastAction"]["user"], "boss", "{st:#}");
    let held = on(&client, &ns, "2").await;
    // Longer than a wave waits (minReadySeconds): still held.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        on(&client, &ns, "2").await,
        held,
        "no further widget got it"
    );
    assert!(held < WIDGETS, "paused before every widget got it: {held}");
    let st = wait_status(&client, &ns, "widgets", 5, "still paused", |s| {
        s["bound"]["rollout"]["phase"] == "Paused"
    })
    .await;
    assert!(st["bound"]["rollout"]["updated"].as_u64() < Some(WIDGETS as u64));

    // Promoted: every widget gets revision 2 now.
    ask(&ns, "promote").await;
    let st = wait_status(&client, &ns, "widgets", 90, "revision 2 everywhere", |s| {
        let r = &s["bound"]["rollout"];
        r["revision"] == second.as_str() && r["phase"] == "Completed" && r["updated"] == WIDGETS
    })
    .await;
    assert_eq!(st["bound"]["rollout"]["lastAction"]["action"], "promote");
    assert_eq!(on(&client, &ns, "2").await, WIDGETS);
    assert!(marks(&client, &ns)
        .await
        .iter()
        .all(|m| *m == hash(&second)));

    // Undone: every widget is served with revision 1 again, in the same waves.
    ask(&ns, "undo").await;
    let st = wait_status(
        &client,
        &ns,
        "widgets",
        120,
        "revision 1 back everywhere",
        |s| {
            let r = &s["bound"]["rollout"];
            r["revision"] == first.as_str() && r["phase"] == "Completed" && r["updated"] == WIDGETS
        },
    )
    .await;
    let r = &st["bound"]["rollout"];
    assert_eq!(r["undone"], second, "{st:#}");
    assert_eq!(r["from"], second, "{st:#}");
    assert_eq!(r["lastAction"]["action"], "undo", "{st:#}");
    assert_eq!(r["lastAction"]["user"], "boss", "{st:#}");
    assert_eq!(
        st["bound"]["currentRevision"], second,
        "the flow's spec still names revision 2"
    );
    let all = results(&client, &ns).await;
    assert!(all.iter().all(|r| r.as_deref() == Some("1")), "{all:?}");
    let m = marks(&client, &ns).await;
    assert!(m.iter().all(|m| *m == hash(&first)), "{m:?}");
}
