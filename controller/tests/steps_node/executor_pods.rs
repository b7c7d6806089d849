//! `spec.options.executor` on testenv's simulated nodes (docs/decisions.md "Executor pod
//! settings"): a flow's tolerations, nodeSelector, priorityClassName, imagePullSecrets, labels
//! and resources are exactly those of its Job's pod template, and the scheduler puts its step
//! on a tainted node only with the toleration (testenv's kubelets run what the scheduler bound).
//! It taints one worker for a while (and puts its own taints back): the other tests of its
//! binary pin their node steps (whose pods tolerate every taint) or let the scheduler pick any
//! node.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::common::harness::{apply, create_flow, setup, wait_done};
use crate::common::{all_nodes, wait_status};

/// The pods of flow `flow` in `ns`.
async fn pods_of(client: &Client, ns: &str, flow: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("ops.example.com/flow={flow}")))
        .await
        .unwrap()
        .items
}

/// A one-step flow creating ConfigMap `made-<name>`, with `executor` settings.
fn flow(ns: &str, name: &str, executor: Value) -> Value {
    json!({"serviceAccountName": "flow",
        "options": {"executor": executor},
        "steps": [{"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("made-{name}"), "namespace": ns}}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_lands_on_a_tainted_node_only_with_the_toleration_and_its_pod_has_what_the_flow_set()
{
    let (client, ns) = setup("executor").await;
    // One worker, tainted and labelled for this test; the others stay as they are. Its own
    // taints are kept (a merge patch replaces the whole list) and put back at the end: the
    // control-plane node is not used, as taking its taint away would let any test's pod land
    // on it for the rest of the binary.
    let worker = all_nodes(&client)
        .await
        .into_iter()
        .rfind(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            !labels.contains_key(pseudoflow_testenv::env::CONTROL_PLANE_LABEL)
        })
        .expect("a worker node");
    let node = worker.metadata.name.clone().unwrap();
    let own_taints =
        serde_json::to_value(worker.spec.and_then(|s| s.taints).unwrap_or_default()).unwrap();
    let pool = format!("pf-{ns}");
    let mut taints = own_taints.as_array().cloned().unwrap_or_default();
    taints.push(json!({"key": "pseudoflow-test/dedicated", "value": pool, "effect": "NoSchedule"}));
    Api::<Node>::all(client.clone())
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"pseudoflow-test/pool": pool}},
                "spec": {"taints": taints}}),
            ),
        )
        .await
        .unwrap();
    apply(
        &client,
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": pool}, "value": 1000}),
    )
    .await;
    let pinned = json!({"nodeSelector": {"pseudoflow-test/pool": pool}});
    let tolerated = json!({
        "nodeSelector": {"pseudoflow-test/pool": pool},
        "tolerations": [{"key": "pseudoflow-test/dedicated", "operator": "Equal", "value": pool, "effect": "NoSchedule"}],
        "priorityClassName": pool,
        "imagePullSecrets": [{"name": "regcred"}],
        "labels": {"team": "db"},
        "annotations": {"example.com/owner": "db-team"},
        "resources": {"requests": {"cpu": "20m"}, "limits": {"memory": "300Mi"}},
    });
    create_flow(&client, &ns, "without", flow(&ns, "without", pinned)).await;
    create_flow(&client, &ns, "with", flow(&ns, "with", tolerated.clone())).await;

    // With the toleration: scheduled on the tainted node, and it ran.
    let done = wait_done(&client, &ns, "with").await;
    assert_eq!(done["phase"], "Succeeded", "{done:#}");
    let pods = pods_of(&client, &ns, "with").await;
    assert_eq!(pods.len(), 1);
    let spec = pods[0].spec.clone().unwrap();
    assert_eq!(
        spec.node_name.as_deref(),
        Some(node.as_str()),
        "bound to the tainted node"
    );

    // The Job's pod template carries exactly what the flow set.
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels("ops.example.com/flow=with"))
        .await
        .unwrap()
        .items;
    let template = serde_json::to_value(&jobs[0].spec.as_ref().unwrap().template).unwrap();
    let t = &template["spec"];
    assert_eq!(t["tolerations"], tolerated["tolerations"], "{template:#}");
    assert_eq!(t["nodeSelector"], tolerated["nodeSelector"]);
    assert_eq!(t["priorityClassName"], json!(pool));
    assert_eq!(t["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(
        t["containers"][0]["resources"],
        json!({"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": "300Mi"}})
    );
    assert_eq!(template["metadata"]["labels"]["team"], "db");
    assert_eq!(
        template["metadata"]["annotations"]["example.com/owner"],
        "db-team"
    );
    assert_eq!(
        template["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "pseudoflow"
    );

    // Without it: the same node selected, never scheduled (the taint repels it). The Job
    // controller makes the pod and the scheduler tries it when they get to it (seconds under
    // load): wait for the scheduler's verdict, not for a fixed time.
    wait_status(&client, &ns, "without", 30, "its step running", |st| {
        st["phase"] == "Running"
    })
    .await;
    let scheduled = |pod: &Pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
    };
    crate::common::eventually(60, "the scheduler tried the pod of 'without'", || async {
        pods_of(&client, &ns, "without")
            .await
            .iter()
            .any(|p| scheduled(p).is_some())
    })
    .await;
    let pods = pods_of(&client, &ns, "without").await;
    assert_eq!(pods.len(), 1, "{pods:#?}");
    let pod = &pods[0];
    assert_eq!(pod.spec.as_ref().unwrap().node_name, None, "not scheduled");
    assert_eq!(
        scheduled(pod),
        Some(("False".to_string(), "Unschedulable".to_string())),
        "the taint keeps it off the node"
    );
    let flows = crate::common::flows(&client, &ns);
    let status = flows.get("without").await.unwrap().data["status"].clone();
    assert_eq!(status["phase"], "Running", "{status:#}");
    // Leave the node as the other tests expect it: its own taints, without this test's label.
    let nodes = Api::<Node>::all(client.clone());
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"pseudoflow-test/pool": null}},
                "spec": {"taints": own_taints}}),
            ),
        )
        .await
        .unwrap();
    let after = nodes.get(&node).await.unwrap();
    assert_eq!(
        serde_json::to_value(after.spec.and_then(|s| s.taints).unwrap_or_default()).unwrap(),
        own_taints,
        "{node} has its own taints again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_a_flow_must_not_choose_are_refused_naming_their_path() {
    let (client, ns) = setup("executor-refused").await;
    // Not written with kubectl's strict field validation, the API server would drop an unknown
    // field; a flow object with it (as stored before a CRD update) is refused by the compiler.
    create_flow(
        &client,
        &ns,
        "bad",
        json!({"serviceAccountName": "flow",
        "options": {"executor": {"labels": {"app.kubernetes.io/managed-by": "me"}}},
        "steps": [{"type": "log", "message": "x"}]}),
    )
    .await;
    let status = wait_done(&client, &ns, "bad").await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(status["reason"], "InvalidSpec", "{status:#}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.options.executor.labels.app.kubernetes.io/managed-by"),
        "{status:#}"
    );
}

/// The cluster's defaults (chart value `executor`, passed as `--executor-defaults`) go under a
/// flow's own settings: the chart renders them into the controller's arguments, and a flow's
/// pod has both — lists joined (the cluster's first), map keys merged, the flow's scalar winning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_executor_defaults_go_under_the_flows_own_settings() {
    let values = json!({"labels": {"tier": "cluster", "team": "ops"},
        "imagePullSecrets": [{"name": "cluster-cred"}],
        "priorityClassName": "cluster-default",
        "resources": {"requests": {"cpu": "50m"}}});
    let docs = pseudoflow_test_support::helm::template(
        "exec-defaults",
        &[
            "--set-json".into(),
            format!("executor={values}"),
            "--set".into(),
            "history.successfulRuns=5".into(),
        ],
    );
    let args: Vec<String> = docs
        .iter()
        .filter(|d| d["kind"] == "Deployment")
        .flat_map(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .cloned()
        })
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    assert!(
        args.contains(&"--successful-runs-history-limit=5".to_string()),
        "{args:?}"
    );
    let json = args
        .iter()
        .find_map(|a| a.strip_prefix("--executor-defaults="))
        .unwrap_or_else(|| panic!("no --executor-defaults in {args:?}"));
    let defaults: pseudoflow_crd::executor::ExecutorOptions = serde_json::from_str(json).unwrap();

    let (client, ns) = crate::common::prepare(
        "executor-defaults",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]),
        json!([]),
    )
    .await;
    let ctx = pseudoflow_controller::Context::new(
        client.clone(),
        crate::common::IMAGE.into(),
        std::sync::Arc::new(pseudoflow_controller::metrics::Metrics::default()),
    )
    .with_executor_defaults(defaults);
    tokio::spawn(pseudoflow_controller::run_controller(
        std::sync::Arc::new(ctx),
        Some(ns.clone()),
    ));
    let class = format!("pf-{ns}");
    apply(
        &client,
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": class}, "value": 100}),
    )
    .await;
    let own = json!({"labels": {"team": "db"}, "imagePullSecrets": [{"name": "regcred"}],
        "priorityClassName": class});
    create_flow(&client, &ns, "merged", flow(&ns, "merged", own)).await;
    let done = wait_done(&client, &ns, "merged").await;
    assert_eq!(done["phase"], "Succeeded", "{done:#}");
    let pods = pods_of(&client, &ns, "merged").await;
    assert_eq!(pods.len(), 1);
    let pod = serde_json::to_value(&pods[0]).unwrap();
    assert_eq!(
        pod["spec"]["imagePullSecrets"],
        json!([{"name": "cluster-cred"}, {"name": "regcred"}])
    );
    assert_eq!(pod["spec"]["priorityClassName"], json!(class));
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "50m"
    );
    let labels = &pod["metadata"]["labels"];
    assert_eq!(
        (&labels["tier"], &labels["team"]),
        (&json!("cluster"), &json!("db"))
    );
}
