//! Seed §13.2, "apply/delete the NLDNS manifest": `examples/nodelocaldns.yaml` installs
//! NodeLocal DNS, then `examples/nodelocaldns-remove.yaml` (as written) removes it — every
//! kubelet's `--resolv-conf` back to the kubeadm default, `/etc/kubelet-resolv.conf` gone, each
//! kubelet restarted once more, and every object of both artifact files deleted.
//! The cluster is prepared for the seed flows as in `examples/nodelocaldns_and_apiserver_vip.rs`
//! ([`crate::common::seed`]).

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use kube::api::{Api, ApiResource, DynamicObject};
use pseudoflow_testenv::env::KUBEADM_FLAGS;

use crate::common::env;
use crate::common::seed::{
    kubelet_restarts, prepare_seed_cluster, run_seed_flow, start_seed_controller,
};

fn read(node: &str, path: &str) -> Option<String> {
    std::fs::read_to_string(env().node_root(node).join(path)).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodelocaldns_is_removed_after_the_install_example() {
    let client = env().client().await.unwrap();
    prepare_seed_cluster(&client).await;
    let ctl = start_seed_controller(&client).await;
    let nodes = ["cp-0", "worker-0", "worker-1"];

    let st = run_seed_flow(&client, "examples/nodelocaldns.yaml", |_| {}).await;
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

    let st = run_seed_flow(&client, "examples/nodelocaldns-remove.yaml", |_| {}).await;
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
        assert_eq!(
            kubelet_restarts(node).len(),
            2,
            "{node}: restarted by each flow"
        );
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
