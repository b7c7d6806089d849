//! Label selectors in Kubernetes' structured form (`matchLabels`/`matchExpressions`), as the
//! seed's `<labelSelector>` allows, in each kind of selector field: `target.selector` (setLabel),
//! `nodeSelector` (a node step fanned out) and `loopNodes.selector`.

use std::collections::BTreeMap;

use serde_json::json;

use crate::common::{create_flow, env, prepare, start_node_controller, wait_done};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_selectors_pick_the_same_nodes_as_their_string_form() {
    let env = env();
    let nodes_rw = json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}]);
    let (client, ns) = prepare("selectors", json!([]), nodes_rw).await;
    let ctl = start_node_controller(&client, &ns).await;
    // Keys of this test's own, so tests sharing the cluster's nodes do not meet.
    let role = format!("role-{ns}");
    let file = format!("etc/pseudoflow/{ns}");
    let marker = format!("etc/pseudoflow/{ns}-loop");
    create_flow(
        &client,
        &ns,
        "structured",
        json!({
            "serviceAccountName": "flow",
            "steps": [
                // Every node that is not a control-plane node gets role-<ns>=worker.
                {"type": "setLabel",
                 "target": {"kind": "Node", "selector": {"matchExpressions": [
                     {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}]}},
                 "labels": {role.clone(): "worker"}},
                // Those nodes, by matchLabels: a file each.
                {"type": "configFile", "path": format!("/{file}"), "content": "${node}\n",
                 "nodeSelector": {"matchLabels": {role.clone(): "worker"}}},
                // The same nodes, by an In expression, one at a time.
                {"type": "loopNodes",
                 "selector": {"matchExpressions": [{"key": role.clone(), "operator": "In", "values": ["worker", "other"]}]},
                 "steps": [{"type": "configFile", "path": format!("/{marker}"), "content": "looped\n"}]}
            ]
        }),
    )
    .await;
    let st = wait_done(&client, &ns, "structured", 180).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");

    let labelled: BTreeMap<String, bool> = crate::common::all_nodes(&client)
        .await
        .into_iter()
        .map(|n| {
            let has = n.metadata.labels.unwrap_or_default().get(&role) == Some(&"worker".into());
            (n.metadata.name.unwrap(), has)
        })
        .collect();
    let expected: BTreeMap<String, bool> =
        [("cp-0", false), ("worker-0", true), ("worker-1", true)]
            .into_iter()
            .map(|(n, b)| (n.to_string(), b))
            .collect();
    assert_eq!(labelled, expected);
    for (node, worker) in &expected {
        let read = |p: &str| std::fs::read_to_string(env.node_root(node).join(p)).ok();
        let (by_labels, by_loop) = (read(&file), read(&marker));
        if *worker {
            assert_eq!(by_labels, Some(format!("{node}\n")), "{node}");
            assert_eq!(by_loop.as_deref(), Some("looped\n"), "{node}");
        } else {
            assert_eq!((by_labels, by_loop), (None, None), "{node} is not selected");
        }
    }
    ctl.abort();
}
