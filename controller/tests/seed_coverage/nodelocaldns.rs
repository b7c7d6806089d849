//! Seed §13.2, "apply/delete the NLDNS manifest": `examples/nodelocaldns.yaml` installs
//! NodeLocal DNS, then `examples/nodelocaldns-remove.yaml` (as written) removes it — every
//! kubelet's `--resolv-conf` back to the kubeadm default, `/etc/kubelet-resolv.conf` gone, each
//! kubelet restarted once more, and every object of both artifact files deleted.
//! Like `scenarios.rs`, the seed flows name no ServiceAccount, so kube-system's `default`
//! account is granted cluster-admin, as an operator running them would grant their identity.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::reconcile::flow_resource;
use pseudoflow_controller::{run_controller, Context};
use pseudoflow_testenv::env::KUBEADM_FLAGS;
use serde_json::{json, Value};

use crate::common::{env, label_privileged, IMAGE};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

async fn apply_text(client: &Client, text: &str) {
    pseudoflow_testenv::apply::apply_text(client, text, None)
        .await
        .unwrap();
}

/// The CRDs, kube-system's rights and the artifact ConfigMap the seed flows read.
async fn prepare(client: &Client) {
    apply_text(
        client,
        &std::fs::read_to_string(repo().join("crd/pseudoflow.yaml")).unwrap(),
    )
    .await;
    apply_text(
        client,
        &std::fs::read_to_string(repo().join("examples/artifacts/crds/third-party-crds.yaml"))
            .unwrap(),
    )
    .await;
    apply_text(client, "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: seed-flows}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects: [{kind: ServiceAccount, name: default, namespace: kube-system}]\n").await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        "pseudoflows.ops.example.com",
        "servicemonitors.monitoring.coreos.com",
    ] {
        let established = await_condition(
            crds.clone(),
            crd,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(Duration::from_secs(30), established)
            .await
            .expect("CRD established")
            .unwrap();
    }
    let mut data = BTreeMap::new();
    for f in ["nodelocaldns.yaml", "servicemonitor-nodelocaldns.yaml"] {
        data.insert(
            f.to_string(),
            std::fs::read_to_string(repo().join("examples/artifacts").join(f)).unwrap(),
        );
    }
    let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pseudoflow-artifacts", "namespace": "kube-system"}, "data": data})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .patch(
            "pseudoflow-artifacts",
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap();
    env().seed_kubeadm_files("https://10.0.0.11:6443").unwrap();
}

/// Applies the example flow `file` and waits for its run to end; returns the status.
async fn run_flow(client: &Client, file: &str) -> Value {
    let flow: Value =
        serde_yaml::from_str(&std::fs::read_to_string(repo().join(file)).unwrap()).unwrap();
    let name = flow["metadata"]["name"].as_str().unwrap().to_string();
    apply_text(client, &serde_json::to_string(&flow).unwrap()).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "kube-system", &flow_resource());
    let done = |o: Option<&DynamicObject>| {
        o.is_some_and(|f| {
            matches!(
                f.data["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            )
        })
    };
    let f = tokio::time::timeout(Duration::from_secs(240), await_condition(api, &name, done))
        .await
        .expect("flow finished")
        .unwrap()
        .unwrap();
    f.data["status"].clone()
}

fn read(node: &str, path: &str) -> Option<String> {
    std::fs::read_to_string(env().node_root(node).join(path)).ok()
}

fn restarts(node: &str) -> usize {
    env()
        .node_calls(node)
        .iter()
        .filter(|l| l.ends_with(" systemctl restart kubelet"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodelocaldns_is_removed_after_the_install_example() {
    let client = env().client().await.unwrap();
    prepare(&client).await;
    label_privileged(&client, "kube-system").await;
    let ctx = Context::new(client.clone(), IMAGE.into(), Arc::new(Metrics::default()))
        .with_node_step_namespaces(["kube-system"].into_iter().collect());
    let ctl = tokio::spawn(run_controller(Arc::new(ctx), Some("kube-system".into())));
    let nodes = ["cp-0", "worker-0", "worker-1"];

    let st = run_flow(&client, "examples/nodelocaldns.yaml").await;
    assert_eq!(st["phase"], "Succeeded", "install: {st:#}");
    for node in nodes {
        assert!(
            read(node, "etc/kubelet-resolv.conf").is_some(),
            "{node} installed"
        );
        assert_ne!(
            read(node, "var/lib/kubelet/kubeadm-flags.env").as_deref(),
            Some(KUBEADM_FLAGS)
        );
    }
    let ds = Api::<DaemonSet>::namespaced(client.clone(), "kube-system");
    assert!(ds.get_opt("nodelocaldns").await.unwrap().is_some());

    let st = run_flow(&client, "examples/nodelocaldns-remove.yaml").await;
    assert_eq!(st["phase"], "Succeeded", "remove: {st:#}");
    for node in nodes {
        assert_eq!(
            read(node, "var/lib/kubelet/kubeadm-flags.env").as_deref(),
            Some(KUBEADM_FLAGS),
            "{node}: kubelet back on the node's resolver"
        );
        assert_eq!(
            read(node, "etc/kubelet-resolv.conf"),
            None,
            "{node}: NodeLocal DNS resolv.conf deleted"
        );
        assert_eq!(restarts(node), 2, "{node}: restarted by each flow");
    }
    assert!(ds.get_opt("nodelocaldns").await.unwrap().is_none());
    assert!(Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .get_opt("nodelocaldns")
        .await
        .unwrap()
        .is_none());
    assert!(
        Api::<ServiceAccount>::namespaced(client.clone(), "kube-system")
            .get_opt("nodelocaldns")
            .await
            .unwrap()
            .is_none()
    );
    let services = Api::<Service>::namespaced(client.clone(), "kube-system");
    for svc in ["nodelocaldns", "nodelocaldns-metrics"] {
        assert!(services.get_opt(svc).await.unwrap().is_none(), "{svc}");
    }
    let monitors = ApiResource {
        group: "monitoring.coreos.com".into(),
        version: "v1".into(),
        api_version: "monitoring.coreos.com/v1".into(),
        kind: "ServiceMonitor".into(),
        plural: "servicemonitors".into(),
    };
    let sm: Api<DynamicObject> = Api::namespaced_with(client.clone(), "kube-system", &monitors);
    assert!(
        sm.list(&Default::default()).await.unwrap().items.is_empty(),
        "ServiceMonitor deleted"
    );
    ctl.abort();
}
