//! The "process kubelet": registers Nodes, keeps them Ready (Lease renewal + status heartbeat),
//! runs the pods bound to them (see [`pod`] and [`runner`]), and serves `pods/exec` and
//! `pods/log` for them (see [`streaming`]).

mod node;
mod pod;
mod runner;
mod streaming;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use kube::Client;

pub use node::NodeSpec;

/// Which images run as local processes, and with which program.
#[derive(Debug, Clone, Default)]
pub struct ImageMap {
    programs: BTreeMap<String, PathBuf>,
    tools: BTreeMap<String, PathBuf>,
}

impl ImageMap {
    /// Maps `image` (exact, or without its tag) to `program`.
    pub fn insert(&mut self, image: &str, program: impl Into<PathBuf>) {
        self.programs.insert(image.to_string(), program.into());
    }

    /// Maps `image` to `program`, with the commands in `tools` on the PATH of its container and
    /// of commands exec'd into it: what the image itself would ship (a database image's
    /// client tools, say).
    pub fn insert_with_tools(
        &mut self,
        image: &str,
        program: impl Into<PathBuf>,
        tools: impl Into<PathBuf>,
    ) {
        self.insert(image, program);
        self.tools.insert(image.to_string(), tools.into());
    }

    /// The program for an image reference, matching with or without the tag.
    pub fn program(&self, image: &str) -> Option<&PathBuf> {
        lookup(&self.programs, image)
    }

    /// The image's tools directory, if it has one.
    pub fn tools(&self, image: &str) -> Option<&PathBuf> {
        lookup(&self.tools, image)
    }
}

fn lookup<'a>(map: &'a BTreeMap<String, PathBuf>, image: &str) -> Option<&'a PathBuf> {
    map.get(image).or_else(|| {
        let untagged = image
            .rsplit_once(':')
            .filter(|(_, tag)| !tag.contains('/'))
            .map(|(i, _)| i)?;
        map.get(untagged)
    })
}

/// What the kubelets need to know about the cluster.
#[derive(Clone)]
pub struct KubeletConfig {
    /// The API server's port on 127.0.0.1.
    pub api_port: u16,
    /// The cluster CA, mounted into pods as a real kubelet does.
    pub ca_crt: PathBuf,
    /// The streaming server's certificate and key (the API server verifies them with `ca_crt`).
    pub serving_crt: PathBuf,
    /// Its key.
    pub serving_key: PathBuf,
    /// Root of the node directories: `<root>/<node>/root` is a node's filesystem.
    pub nodes_dir: PathBuf,
    /// Which program runs for which image (and its tools on PATH).
    pub images: Arc<ImageMap>,
}

impl KubeletConfig {
    /// A node's root directory (what its pods see at a `hostPath: /` mount).
    pub fn node_root(&self, node: &str) -> PathBuf {
        self.nodes_dir.join(node).join("root")
    }

    /// A node's recorded `nsenter`/`systemctl` calls.
    pub fn calls_log(&self, node: &str) -> PathBuf {
        self.nodes_dir.join(node).join("calls.log")
    }

    fn node_dir(&self, node: &str) -> PathBuf {
        self.nodes_dir.join(node)
    }

    /// Where a pod's process state lives on its node (launcher, env, log, volumes).
    fn pod_dir(&self, node: &str, ns: &str, pod: &str) -> PathBuf {
        self.node_dir(node).join("pods").join(format!("{ns}_{pod}"))
    }
}

/// Registers the nodes and starts their kubelets on the current runtime.
pub async fn start(client: Client, cfg: KubeletConfig, nodes: &[NodeSpec]) -> Result<()> {
    // One streaming server for all nodes: the exec path names the pod, which names its node.
    let port = streaming::start(client.clone(), cfg.clone()).await?;
    for spec in nodes {
        node::prepare_dirs(&cfg, &spec.name)?;
        node::register(&client, spec, port).await?;
        tokio::spawn(node::heartbeat(client.clone(), spec.name.clone(), port));
        tokio::spawn(pod::watch_pods(
            client.clone(),
            cfg.clone(),
            spec.name.clone(),
        ));
    }
    Ok(())
}

/// Shell-quotes one argument.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

pub(crate) fn path_str(p: &Path) -> String {
    p.display().to_string()
}
