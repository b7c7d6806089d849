//! The status a kubelet reports for a pod (waiting, running, terminated), written to the
//! status subresource with a kubelet's retries: what the pod watch (`pod.rs`) and the process
//! runners (`runner.rs`) both report.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::json;

/// Now, as pod status timestamps show it.
pub(super) fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Status of a pod whose containers wait (an image that cannot be pulled): Pending, not Ready.
pub(super) async fn report_waiting(
    client: &Client,
    pod: &Pod,
    reason: &str,
    message: &str,
) -> kube::Result<Pod> {
    let t = now();
    let spec = pod.spec.clone().unwrap_or_default();
    let statuses: Vec<_> = spec
        .containers
        .iter()
        .map(|c| json!({"name": c.name, "image": c.image, "imageID": "", "ready": false, "started": false, "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}}))
        .collect();
    let not_ready = |ty: &str| json!({"type": ty, "status": "False", "lastTransitionTime": t, "reason": "ContainersNotReady", "message": format!("containers with unready status: [{}]", spec.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(" "))});
    let cond = |ty: &str| json!({"type": ty, "status": "True", "lastTransitionTime": t});
    let status = json!({"status": {
        "phase": "Pending", "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}], "startTime": t,
        "conditions": [cond("PodScheduled"), cond("Initialized"), not_ready("ContainersReady"), not_ready("Ready")],
        "containerStatuses": statuses,
    }});
    patch_status(client, pod, status).await
}

/// Status of a running pod whose containers are all ready.
pub(super) async fn report_running(client: &Client, pod: &Pod, ready: bool) -> kube::Result<Pod> {
    let t = now();
    let spec = pod.spec.clone().unwrap_or_default();
    let host_network = spec.host_network.unwrap_or(false);
    let ip = if host_network {
        "127.0.0.1".to_string()
    } else {
        pod_ip(pod)
    };
    let statuses: Vec<_> = spec
        .containers
        .iter()
        .map(|c| json!({"name": c.name, "image": c.image, "imageID": c.image, "ready": ready, "started": true, "restartCount": 0, "containerID": format!("testenv://{}", c.name), "state": {"running": {"startedAt": t}}}))
        .collect();
    let cond = |ty: &str| json!({"type": ty, "status": "True", "lastTransitionTime": t});
    let status = json!({"status": {
        "phase": "Running", "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}], "podIP": ip, "podIPs": [{"ip": ip}], "startTime": t,
        "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
        "containerStatuses": statuses,
    }});
    patch_status(client, pod, status).await
}

/// Final status of a pod whose process ended.
pub(super) async fn report_terminated(
    client: &Client,
    pod: &Pod,
    exit_code: i32,
    message: &str,
    started_at: &str,
) -> kube::Result<Pod> {
    let t = now();
    let c = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .cloned()
        .unwrap_or_default();
    let reason = if exit_code == 0 { "Completed" } else { "Error" };
    let phase = if exit_code == 0 {
        "Succeeded"
    } else {
        "Failed"
    };
    let terminated = json!({"exitCode": exit_code, "reason": reason, "message": message, "startedAt": started_at, "finishedAt": t, "containerID": format!("testenv://{}", c.name)});
    let cond = |ty: &str, st: &str| json!({"type": ty, "status": st, "lastTransitionTime": t, "reason": if st == "False" { "PodCompleted" } else { "" }});
    let status = json!({"status": {
        "phase": phase,
        "conditions": [cond("PodScheduled", "True"), cond("Initialized", "True"), cond("ContainersReady", "False"), cond("Ready", "False")],
        "containerStatuses": [{"name": c.name, "image": c.image, "imageID": c.image, "ready": false, "started": false, "restartCount": 0, "state": {"terminated": terminated}}],
    }});
    patch_status(client, pod, status).await
}

/// Final status of a pod whose process could not start (exit code 128).
pub(super) async fn report_failed(client: &Client, pod: &Pod, message: &str) -> kube::Result<Pod> {
    report_terminated(client, pod, 128, message, &now()).await
}

async fn patch_status(client: &Client, pod: &Pod, status: serde_json::Value) -> kube::Result<Pod> {
    let api: Api<Pod> = Api::namespaced(
        client.clone(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    // Retried like a kubelet's status updates: a pod that ended while the API server was down
    // must still be reported, or its Job never finishes.
    let (pp, patch) = (PatchParams::default(), Patch::Merge(&status));
    super::with_retries(&format!("status of pod {name}"), || {
        api.patch_status(name, &pp, &patch)
    })
    .await
}

/// A stable fake pod IP in 10.244.0.0/16, from the pod's uid.
fn pod_ip(pod: &Pod) -> String {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let h = uid
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!("10.244.{}.{}", (h >> 8) % 256, (h % 254) + 1)
}
