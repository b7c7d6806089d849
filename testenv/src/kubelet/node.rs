//! Node registration and heartbeats: a Node object with capacity, labels and taints, a Lease in
//! `kube-node-lease` renewed every 10 s, and a Ready condition kept fresh, so the real
//! node-lifecycle controller treats the node as healthy.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use super::KubeletConfig;

/// One simulated node.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// The Node's name.
    pub name: String,
    /// The Node's labels (roles, zones).
    pub labels: BTreeMap<String, String>,
    /// `(key, effect)` taints, e.g. the control-plane `NoSchedule` taint.
    pub taints: Vec<(String, String)>,
}

impl NodeSpec {
    /// A worker node.
    pub fn worker(name: &str) -> Self {
        NodeSpec {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: vec![],
        }
    }

    /// A control-plane node labelled and tainted like kubeadm does.
    pub fn control_plane(name: &str) -> Self {
        let key = "node-role.kubernetes.io/control-plane".to_string();
        NodeSpec {
            name: name.into(),
            labels: [(key.clone(), String::new())].into(),
            taints: vec![(key, "NoSchedule".into())],
        }
    }
}

pub(super) fn prepare_dirs(cfg: &KubeletConfig, node: &str) -> Result<()> {
    let root = cfg.node_root(node);
    for d in ["etc", "var/lib/kubelet", "etc/kubernetes", "tmp"] {
        std::fs::create_dir_all(root.join(d))?;
    }
    std::fs::write(root.join("etc/hostname"), format!("{node}\n"))?;
    let shims = cfg.node_dir(node).join("shims");
    std::fs::create_dir_all(&shims)?;
    let log = super::sh_quote(&super::path_str(&cfg.calls_log(node)));
    let record =
        // One line per call, even when an argument (a script) spans lines.
        |tool: &str| format!("printf '%s %s %s\\n' \"$(date +%s.%N)\" {tool} \"$(printf '%s' \"$*\" | tr '\\n' ' ')\" >> {log}\n");
    // Entering the node's namespaces gives the command the node's tools: the host's here.
    let host_path = format!(
        "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        super::path_str(&shims)
    );
    let nsenter = format!(
        "#!/bin/sh\n# testenv: records the call, then runs the command after nsenter's options, with the node's (here: the host's) tools.\nPATH={}\n{}while [ $# -gt 0 ]; do case \"$1\" in --) shift; break;; -t|-S|-G|-w|-r|-W|--target|--setuid|--setgid|--wd|--root|--wdns) shift 2;; -*) shift;; *) break;; esac; done\n[ $# -gt 0 ] && exec \"$@\"\nexit 0\n",
        super::sh_quote(&host_path),
        record("nsenter")
    );
    let systemctl = format!("#!/bin/sh\n# testenv: records the call; the simulated node has no init system.\n{}exit 0\n", record("systemctl"));
    for (name, body) in [("nsenter", nsenter), ("systemctl", systemctl)] {
        let p = shims.join(name);
        std::fs::write(&p, body)?;
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    }
    Ok(())
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

pub(super) async fn register(client: &Client, spec: &NodeSpec, kubelet_port: u16) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut labels = spec.labels.clone();
    labels.insert("kubernetes.io/hostname".into(), spec.name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("kubernetes.io/arch".into(), "amd64".into());
    let taints: Vec<_> = spec
        .taints
        .iter()
        .map(|(k, e)| json!({"key": k, "effect": e}))
        .collect();
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {"taints": taints},
    }))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("registering node"),
    }
    nodes
        .patch_status(
            &spec.name,
            &PatchParams::default(),
            &Patch::Merge(status(&spec.name, kubelet_port)),
        )
        .await
        .context("setting node status")?;
    Ok(())
}

fn status(name: &str, kubelet_port: u16) -> serde_json::Value {
    let t = now();
    let cond = |ty: &str, st: &str, reason: &str| json!({"type": ty, "status": st, "reason": reason, "message": "testenv process kubelet", "lastHeartbeatTime": t, "lastTransitionTime": t});
    json!({"status": {
        "capacity": {"cpu": "16", "memory": "64Gi", "pods": "250", "ephemeral-storage": "100Gi"},
        "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "250", "ephemeral-storage": "100Gi"},
        "conditions": [
            cond("Ready", "True", "KubeletReady"),
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID"),
        ],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "architecture": "amd64", "bootID": name, "containerRuntimeVersion": "testenv://process",
            "kernelVersion": "testenv", "kubeProxyVersion": "", "kubeletVersion": crate::binaries::K8S_VERSION,
            "machineID": name, "operatingSystem": "linux", "osImage": "pseudoflow testenv", "systemUUID": name
        }
    }})
}

/// Renews the node's Lease and Ready condition every 10 s, forever.
pub(super) async fn heartbeat(client: Client, name: String, kubelet_port: u16) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client);
    loop {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now())},
        });
        let pp = PatchParams::apply("testenv-kubelet").force();
        if let Err(e) = leases.patch(&name, &pp, &Patch::Apply(&lease)).await {
            tracing::warn!(node = %name, "lease renewal failed: {e}");
        }
        if let Err(e) = nodes
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Strategic(status(&name, kubelet_port)),
            )
            .await
        {
            tracing::warn!(node = %name, "node status heartbeat failed: {e}");
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// Whether a Node reports Ready=True (the condition a kubelet, this one or a real one, keeps
/// fresh).
pub fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
