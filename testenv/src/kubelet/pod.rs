//! Watching the pods bound to one node and driving each through its lifecycle, like a kubelet:
//! mapped images run as processes (see [`super::runner`]); a declared stand-in
//! ([`crate::standins`]) runs as a process that sleeps; any other image fails to pull
//! (`ErrImagePull`, then `ImagePullBackOff`: Pending, never Ready), as on an offline cluster; a
//! pod being deleted has its process group killed and is then removed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;

use super::pod_status::{now, report_failed, report_running, report_terminated, report_waiting};
use super::runner;
use super::started::{set_pid, still_wanted, StartedHandle as Started};
use super::KubeletConfig;

/// What one kubelet incarnation of a node keeps about its pods.
#[derive(Default)]
pub(super) struct NodePods {
    /// The pods it started (see [`super::started::StartedHandle`]).
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
