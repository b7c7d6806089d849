//! Watching the pods bound to one node and driving each through its lifecycle, like a kubelet:
//! mapped images run as processes (see [`super::runner`]); a declared stand-in
//! ([`crate::standins`]) runs as a process that sleeps; any other image fails to pull
//! (`ErrImagePull`, then `ImagePullBackOff`: Pending, never Ready), as on an offline cluster; a
//! pod being deleted has its process group killed and is then removed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use serde_json::json;

use super::runner;
use super::KubeletConfig;

/// Pods this kubelet has started (by uid), with the pid of a running process if any.
pub(super) type StartedHandle = Arc<Mutex<HashMap<String, Option<u32>>>>;
type Started = StartedHandle;

/// What one kubelet incarnation of a node keeps about its pods.
#[derive(Default)]
pub(super) struct NodePods {
    /// The pods it started (see [`StartedHandle`]).
    started: Started,
    /// The tasks running its pods, aborted when the node dies.
    runners: Mutex<Vec<tokio::task::AbortHandle>>,
    /// Pods an earlier kubelet of this node started: their processes died with it.
    gone: HashSet<String>,
}

impl NodePods {
    /// A fresh kubelet's pods; `gone` are the pods earlier kubelets of the node started.
    pub(super) fn new(gone: HashSet<String>) -> Self {
        NodePods {
            gone,
            ..Default::default()
        }
    }

    /// The node died: stops every pod task without reporting anything and kills every pod
    /// process. Returns how many processes were killed and every pod started.
    pub(super) fn die(&self) -> (usize, HashSet<String>) {
        for r in self.runners.lock().unwrap().drain(..) {
            r.abort();
        }
        let started: HashMap<String, Option<u32>> =
            std::mem::take(&mut *self.started.lock().unwrap());
        let mut killed = 0;
        for pid in started.values().flatten() {
            crate::procs::kill_group(*pid);
            killed += 1;
        }
        (
            killed,
            started.into_keys().chain(self.gone.clone()).collect(),
        )
    }
}

/// Records the pid of a pod's process so deletion can kill it.
pub(super) fn set_pid(started: &Started, uid: &str, pid: Option<u32>) {
    if let Some(slot) = started.lock().unwrap().get_mut(uid) {
        *slot = pid;
    }
}

/// False once the pod was deleted (its end need not be reported).
pub(super) fn still_wanted(started: &Started, uid: &str) -> bool {
    started.lock().unwrap().contains_key(uid)
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Watches the pods with `spec.nodeName=<node>` and handles every change, until aborted. A lost
/// watch (the API server restarted) is re-established with backoff.
pub(super) async fn watch_pods(
    client: Client,
    cfg: KubeletConfig,
    node: String,
    node_pods: Arc<NodePods>,
) {
    let pods: Api<Pod> = Api::all(client.clone());
    let started = &node_pods.started;
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut stream = watcher::watcher(pods, config).default_backoff().boxed();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Apply(pod) | Event::InitApply(pod)) => {
                handle(&client, &cfg, &node, &node_pods, pod).await
            }
            Ok(Event::Delete(pod)) => {
                let uid = pod.metadata.uid.unwrap_or_default();
                if let Some(Some(pid)) = started.lock().unwrap().remove(&uid) {
                    crate::procs::kill_group(pid);
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(node = %node, "pod watch: {e}"),
        }
    }
}

async fn handle(client: &Client, cfg: &KubeletConfig, node: &str, node_pods: &NodePods, pod: Pod) {
    let started = &node_pods.started;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    if pod.metadata.deletion_timestamp.is_some() {
        remove_deleted(client, started, &ns, &name, &uid).await;
        return;
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    if matches!(phase.as_str(), "Succeeded" | "Failed")
        || started.lock().unwrap().contains_key(&uid)
    {
        return;
    }
    if node_pods.gone.contains(&uid) {
        // Started before the node died: its process is gone, as after a reboot.
        started.lock().unwrap().insert(uid, None);
        let message = "testenv: the node died while this pod ran; its process is gone";
        // Killed with its node (SIGKILL, 128 + 9): it ran, unlike a container that never
        // started (128, a runtime's StartError).
        if let Err(e) = report_terminated(client, &pod, 137, message, &now()).await {
            tracing::warn!(pod = %name, "marking Failed: {e}");
        }
        return;
    }
    if phase == "Running" {
        return;
    }
    started.lock().unwrap().insert(uid.clone(), None);
    let Some(container) = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .cloned()
    else {
        return;
    };
    let image = container.image.clone().unwrap_or_default();
    let (client, cfg, node, started) = (
        client.clone(),
        cfg.clone(),
        node.to_string(),
        started.clone(),
    );
    let task = match cfg.images.program(&image).cloned() {
        Some(program) => tokio::spawn(async move {
            if let Err(e) = runner::run(&client, &cfg, &node, &pod, &program, &started).await {
                tracing::warn!(pod = %name, "testenv kubelet could not run the pod: {e:#}");
                let _ = report_failed(&client, &pod, &format!("testenv kubelet: {e:#}")).await;
            }
        }),
        None => tokio::spawn(async move {
            let result = match crate::standins::stand_in(&image) {
                Some(s) => run_stand_in(&client, &cfg, &node, &pod, s, &started).await,
                None => fail_pull(&client, &pod, &image).await,
            };
            if let Err(e) = result {
                tracing::warn!(pod = %name, "testenv kubelet, image {image}: {e:#}");
            }
        }),
    };
    let mut runners = node_pods.runners.lock().unwrap();
    runners.retain(|r| !r.is_finished());
    runners.push(task.abort_handle());
}

/// A pod being deleted: its process is killed and the pod removed at once (grace 0, this
/// very pod by its uid), as a kubelet does once its containers stopped.
async fn remove_deleted(client: &Client, started: &Started, ns: &str, name: &str, uid: &str) {
    if let Some(Some(pid)) = started.lock().unwrap().remove(uid) {
        crate::procs::kill_group(pid);
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let _ = api.delete(name, &dp).await;
}

/// Runs a declared stand-in: a process that sleeps until the pod is deleted (the container's
/// command is not run: there is no such program here), reported like any container.
async fn run_stand_in(
    client: &Client,
    cfg: &KubeletConfig,
    node: &str,
    pod: &Pod,
    stand_in: &crate::standins::StandIn,
    started: &Started,
) -> anyhow::Result<()> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let dir = cfg.pod_dir(node, &ns, &name);
    std::fs::create_dir_all(&dir)?;
    let log = dir.join("log");
    std::fs::write(
        &log,
        format!(
            "testenv stand-in for {} ({}): sleeps until the pod is deleted; see testenv/src/standins.rs\n",
            stand_in.image, stand_in.used_by
        ),
    )?;
    let out = std::fs::OpenOptions::new().append(true).open(&log)?;
    let mut cmd = tokio::process::Command::new(super::tools::host_binary("sleep")?);
    cmd.arg("infinity")
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true);
    crate::procs::own_group_and_die_with_parent(&mut cmd);
    let started_at = now();
    let mut child = cmd.spawn()?;
    set_pid(started, &uid, child.id());
    report_running(client, pod, true).await?;
    let status = child.wait().await?;
    if still_wanted(started, &uid) {
        let code = status.code().unwrap_or(137);
        report_terminated(client, pod, code, "", &started_at).await?;
    }
    Ok(())
}

/// An image that is neither mapped nor a declared stand-in: no registry is reachable, so the pull
/// fails as on an offline cluster — `ErrImagePull`, then `ImagePullBackOff` — and the pod stays
/// Pending, never Ready.
async fn fail_pull(client: &Client, pod: &Pod, image: &str) -> anyhow::Result<()> {
    let message = format!(
        "failed to pull and unpack image \"{image}\": testenv has no registry; the image is neither mapped to a program nor a declared stand-in (testenv/src/standins.rs)"
    );
    report_waiting(client, pod, "ErrImagePull", &message).await?;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let backoff = format!("Back-off pulling image \"{image}\"");
    report_waiting(client, pod, "ImagePullBackOff", &backoff).await?;
    Ok(())
}

/// Status of a pod whose containers wait (an image that cannot be pulled): Pending, not Ready.
async fn report_waiting(
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
