//! The served mark of a flow recorded in its objects is sealed by a controller holding the
//! approval key (`bind/served/seal.rs`, issue #41 item 4): a tenant who may patch their own
//! object writes a mark that says their change was served, or copies another object's sealed
//! mark onto theirs with its uid rewritten, and the object is served all the same; the
//! controller's own mark, sealed, then replaces theirs. Each test fails with the seal check
//! switched off (the forged mark is believed: no run).

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::Client;
use pseudoflow_controller::approval::Key;
use pseudoflow_controller::bind::object;
use pseudoflow_controller::bind::served::{mark_key, Mark, Read, Sealer};
use pseudoflow_crd::bind::Bind;
use serde_json::{json, Value};

use crate::common::bound::*;
use crate::common::{create_flow, eventually};
use crate::in_object::{config_map, delete_config_map, in_object_flow, mark_of};

/// Widget `name` once its sealed served mark is there: the object, and the mark.
async fn served(client: &Client, ns: &str, name: &str, key: &Key) -> (DynamicObject, String) {
    wait_widget(client, ns, name, "Running").await;
    eventually(30, "the served mark", || async {
        mark_of(client, ns, name).await.is_some()
    })
    .await;
    let w = widgets(client, ns).get(name).await.unwrap();
    let raw = mark_of(client, ns, name).await.unwrap();
    let uid = w.metadata.uid.as_deref().unwrap();
    let read = sealer(key, ns).read(&raw, uid);
    assert!(matches!(read, Read::Believed(_)), "sealed: {raw} {read:?}");
    (w, raw)
}

fn sealer<'a>(key: &'a Key, ns: &'a str) -> Sealer<'a> {
    Sealer {
        key: Some(key),
        flow: (ns, "widgets"),
    }
}

/// Patches widget `name` with `patch` as the tenant.
async fn tenant_patch(client: &Client, ns: &str, name: &str, patch: Value) {
    widgets(client, ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Waits until the controller's own sealed mark replaces `forged` on widget `name`.
async fn resealed(client: &Client, ns: &str, name: &str, key: &Key, forged: &str) {
    eventually(30, "the controller's own mark written again", || async {
        mark_of(client, ns, name).await.as_deref() != Some(forged)
    })
    .await;
    served(client, ns, name, key).await;
}

/// Attack (skip a run): the tenant changes their widget's spec and, in the same patch, writes
/// the controller's mark edited to record the new content (its generation and field digests,
/// computed as the controller computes them) with the old seal. Unsealed, that mark says the
/// change was served and nothing runs; sealed, it is not believed and the change runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_a_mark_forged_to_record_a_change_does_not_skip_its_run() {
    let key = Key::random();
    let (client, ns) = setup_with_key("seal-skip", all_verbs(), &key).await;
    let flow = in_object_flow();
    create_flow(&client, &ns, "widgets", flow.clone()).await;
    create_widget(&client, &ns, "w", json!({"version": "one"})).await;
    let (w, raw) = served(&client, &ns, "w", &key).await;
    let mut next = w.clone();
    next.data["spec"]["version"] = json!("two");
    next.metadata.generation = w.metadata.generation.map(|g| g + 1);
    let bind: Bind = serde_json::from_value(flow["bind"].clone()).unwrap();
    let mut forged: Value = serde_json::from_str(&raw).unwrap();
    let (f, g) = (forged["f"].as_str().unwrap(), forged["g"].as_i64().unwrap());
    let now = Mark::of(f, g, &object::view(&next), &bind);
    let now = serde_json::to_value(now).unwrap();
    for field in ["o", "d"] {
        forged[field] = now[field].clone();
    }
    let forged = forged.to_string();
    assert_ne!(forged, raw);
    let patch = json!({"metadata": {"annotations": {mark_key(&ns, "widgets"): forged}},
        "spec": {"version": "two"}});
    tenant_patch(&client, &ns, "w", patch).await;
    let after = widgets(&client, &ns).get("w").await.unwrap();
    assert_eq!(
        after.metadata.generation, next.metadata.generation,
        "the forged mark names the generation the change made"
    );
    eventually(60, "the change run though the mark says served", || async {
        config_map(&client, &ns, "w-made-two").await.is_some()
    })
    .await;
    let made = config_map(&client, &ns, "w-made-two").await.unwrap();
    assert_eq!(made["event"], "update", "served again, not as new");
    resealed(&client, &ns, "w", &key, &forged).await;
}

/// Attack (forge another object's record): the tenant copies widget b's sealed mark onto
/// widget a, with b's uid rewritten to a's (a copy as it is counts as none already: the
/// keyless `in_object.rs::attack_a_forged_mark_moves_only_its_own_object`). Same content,
/// same generation: unsealed, a would look served; sealed, a is served again and b is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_another_objects_mark_with_its_uid_rewritten_is_not_believed() {
    let key = Key::random();
    let (client, ns) = setup_with_key("seal-copy", all_verbs(), &key).await;
    create_flow(&client, &ns, "widgets", in_object_flow()).await;
    for w in ["a", "b"] {
        create_widget(&client, &ns, w, json!({"version": "one"})).await;
    }
    let (a, _) = served(&client, &ns, "a", &key).await;
    let (b, b_mark) = served(&client, &ns, "b", &key).await;
    for w in ["a", "b"] {
        delete_config_map(&client, &ns, &format!("{w}-made-one")).await;
    }
    let (a_uid, b_uid) = (a.metadata.uid.unwrap(), b.metadata.uid.unwrap());
    let forged = b_mark.replace(&format!("\"{b_uid}\""), &format!("\"{a_uid}\""));
    assert_ne!(forged, b_mark);
    // The mark's own write wakes no flow (as the controller's echo would not); the label does.
    let patch = json!({"metadata": {"annotations": {mark_key(&ns, "widgets"): forged},
        "labels": {"touched": "yes"}}});
    tenant_patch(&client, &ns, "a", patch).await;
    eventually(60, "a served again", || async {
        config_map(&client, &ns, "a-made-one").await.is_some()
    })
    .await;
    resealed(&client, &ns, "a", &key, &forged).await;
    assert_eq!(
        mark_of(&client, &ns, "b").await.unwrap(),
        b_mark,
        "b's mark untouched"
    );
    assert!(
        config_map(&client, &ns, "b-made-one").await.is_none(),
        "b was not served again"
    );
}
