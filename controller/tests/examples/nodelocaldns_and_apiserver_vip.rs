//! The seed's two cluster scenarios end to end (examples/nodelocaldns.yaml and
//! examples/apiserver-vip.yaml, as written) on three simulated nodes, then a re-run through the
//! run annotation that must change nothing (but restarts each kubelet again, the default), and
//! the `onlyIfChanged` variant that restarts nothing.
//! The seed flows name no ServiceAccount, so this test grants kube-system's `default` account
//! cluster-admin, as a cluster operator running them would grant their flow identity.

use std::time::SystemTime;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::Client;
use pseudoflow_testenv::TestEnv;
use serde_json::{json, Value};

use crate::common::env;
use crate::common::seed::{
    kubelet_restarts, prepare_seed_cluster, run_seed_flow, start_seed_controller,
};

fn read(env: &TestEnv, node: &str, path: &str) -> String {
    std::fs::read_to_string(env.node_root(node).join(path)).unwrap_or_default()
}

fn mtime(env: &TestEnv, node: &str, path: &str) -> SystemTime {
    std::fs::metadata(env.node_root(node).join(path))
        .unwrap()
        .modified()
        .unwrap()
}

fn secs(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_scenarios_run_end_to_end_and_rerun_changes_nothing() {
    let env = env();
    let client = env.client().await.unwrap();
    prepare_seed_cluster(&client).await;
    // The seed flows run node steps in kube-system: opt it in, label and allow-list.
    let ctl = start_seed_controller(&client).await;
    let nodes = ["cp-0", "worker-0", "worker-1"];

    // NodeLocal DNS.
    let st = run_seed_flow(&client, "examples/nodelocaldns.yaml", |_| {}).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let ds = Api::<DaemonSet>::namespaced(client.clone(), "kube-system")
        .get("nodelocaldns")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        (ds.desired_number_scheduled, ds.number_available),
        (3, Some(3))
    );
    let resolv =
        "nameserver 100.64.0.10\noptions ndots:5\nsearch cluster.local svc.cluster.local\n";
    let mut previous_restart = 0.0;
    for node in nodes {
        assert_eq!(read(env, node, "etc/kubelet-resolv.conf"), resolv, "{node}");
        let patched = "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock --resolv-conf=/etc/kubelet-resolv.conf\"\n";
        assert_eq!(
            read(env, node, "var/lib/kubelet/kubeadm-flags.env"),
            patched,
            "{node}"
        );
        let r = kubelet_restarts(node);
        assert_eq!(r.len(), 1, "one kubelet restart on {node}: {r:?}");
        let files_written = secs(mtime(env, node, "var/lib/kubelet/kubeadm-flags.env"));
        assert!(r[0] >= files_written, "{node}: restart after its files");
        assert!(
            files_written >= previous_restart,
            "{node}: files changed only after the previous node restarted (rolling)"
        );
        previous_restart = r[0];
    }

    // API VIP: control plane gets three kubeconfigs re-pointed, workers only kubelet.conf.
    let st = run_seed_flow(&client, "examples/apiserver-vip.yaml", |_| {}).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let vip = "server: https://100.64.0.2:6443";
    for f in ["kubelet.conf", "controller-manager.conf", "scheduler.conf"] {
        assert!(
            read(env, "cp-0", &format!("etc/kubernetes/{f}")).contains(vip),
            "cp-0 {f}"
        );
    }
    for node in ["worker-0", "worker-1"] {
        assert!(
            read(env, node, "etc/kubernetes/kubelet.conf").contains(vip),
            "{node}"
        );
        assert!(!env
            .node_root(node)
            .join("etc/kubernetes/controller-manager.conf")
            .exists());
        assert_eq!(kubelet_restarts(node).len(), 2, "{node}: once per flow");
    }
    assert_eq!(kubelet_restarts("cp-0").len(), 2);
    let svc = Api::<Service>::namespaced(client.clone(), "kube-system")
        .get("kube-apiserver-lb")
        .await
        .unwrap();
    assert_eq!(svc.spec.unwrap().type_.as_deref(), Some("LoadBalancer"));

    // Re-run both through the annotation: no file and no API object changes.
    let files = [
        "etc/kubelet-resolv.conf",
        "var/lib/kubelet/kubeadm-flags.env",
        "etc/kubernetes/kubelet.conf",
    ];
    let before: Vec<SystemTime> = nodes
        .iter()
        .flat_map(|n| files.iter().map(move |f| mtime(env, n, f)))
        .collect();
    // What a write would change: spec, labels, annotations. Not the resourceVersion, which the
    // DaemonSet controller's status updates bump whenever a (restarted) kubelet reports its pod.
    let rv = |client: Client| async move {
        let ds = Api::<DaemonSet>::namespaced(client.clone(), "kube-system")
            .get("nodelocaldns")
            .await
            .unwrap();
        let svc = Api::<Service>::namespaced(client, "kube-system")
            .get("kube-apiserver-lb")
            .await
            .unwrap();
        json!([
            ds.metadata.generation,
            ds.metadata.labels,
            ds.metadata.annotations,
            ds.spec,
            svc.metadata.labels,
            svc.metadata.annotations,
            svc.spec,
        ])
    };
    let rv_before = rv(client.clone()).await;
    let again =
        |f: &mut Value| f["metadata"]["annotations"] = json!({"ops.example.com/run": "again"});
    for file in ["examples/nodelocaldns.yaml", "examples/apiserver-vip.yaml"] {
        let st = run_seed_flow(&client, file, again).await;
        assert_eq!(st["phase"], "Succeeded", "{st:#}");
        let changed: Vec<&Value> = st["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                s["changed"] == json!(true)
                    && !matches!(s["type"].as_str(), Some("execNode" | "waitFor"))
            })
            .collect();
        assert!(changed.is_empty(), "a re-run changes nothing: {changed:#?}");
    }
    let after: Vec<SystemTime> = nodes
        .iter()
        .flat_map(|n| files.iter().map(move |f| mtime(env, n, f)))
        .collect();
    assert_eq!(before, after, "no file rewritten (mtimes unchanged)");
    assert_eq!(
        rv(client.clone()).await,
        rv_before,
        "no API object written (specs, labels, annotations, generation unchanged)"
    );
    // ... but each kubelet is restarted again, once per flow: a restart after unchanged files is
    // not skipped unless the flow asks (docs/decisions.md, "Node steps").
    for node in nodes {
        assert_eq!(
            kubelet_restarts(node).len(),
            4,
            "{node}: restarted by each re-run"
        );
    }

    // With onlyIfChanged on the restart, a third run restarts no kubelet.
    let restarts_before: usize = nodes.iter().map(|n| kubelet_restarts(n).len()).sum();
    let st = run_seed_flow(&client, "examples/nodelocaldns.yaml", |f| {
        f["metadata"]["annotations"] = json!({"ops.example.com/run": "handlers"});
        f["spec"]["steps"][3]["steps"][2]["onlyIfChanged"] = json!(true);
    })
    .await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let restarts_after: usize = nodes.iter().map(|n| kubelet_restarts(n).len()).sum();
    assert_eq!(
        restarts_before, restarts_after,
        "nothing changed, so no kubelet restarted"
    );
    ctl.abort();
}
