//! The simulated kubelet honours evictions as a real one does: a pod evicted through the
//! Eviction API (`pods/eviction`, what `drain` uses) has its process stopped and disappears.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use pseudoflow_testenv::{shared, TestEnv, SHELL_IMAGE};
use serde_json::json;

fn env() -> &'static TestEnv {
    shared().unwrap_or_else(|e| panic!("testenv did not start: {e}"))
}

fn size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test]
async fn an_evicted_pod_has_its_process_stopped_and_is_deleted() {
    let env = env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("evict").await.unwrap();
    let beat = format!("tmp/{ns}.beat");
    // The process appends to a file on its node as long as it lives.
    let script = format!("while true; do echo beat >> /host/{beat}; sleep 0.2; done");
    let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "beater"},
        "spec": {"nodeName": "worker-1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
            "volumes": [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}],
            "containers": [{"name": "b", "image": SHELL_IMAGE, "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "host", "mountPath": "/host"}]}]}}))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let file = env.node_root("worker-1").join(&beat);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while size(&file) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the pod never ran: {}",
            env.pod_log("worker-1", &ns, "beater")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "beater", "namespace": ns}});
    let _: serde_json::Value = pods
        .create_subresource("eviction", "beater", &PostParams::default(), &eviction)
        .await
        .expect("the eviction is accepted (no budget covers the pod)");
    let uid = created.metadata.uid.unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(pods.clone(), "beater", conditions::is_deleted(&uid)),
    )
    .await
    .expect("the evicted pod is deleted well within its 30 s grace period")
    .unwrap();

    let after = size(&file);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        size(&file),
        after,
        "the evicted pod's process still writes: it was not stopped"
    );
}
