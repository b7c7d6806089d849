//! The "process kubelet": registers Nodes, keeps them Ready (Lease renewal + status heartbeat),
//! runs the pods bound to them (see [`pod`] and [`runner`]), and serves `pods/exec` and
//! `pods/log` for them (see [`streaming`]).

mod node;
mod pod;
mod runner;
mod streaming;
pub mod tools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use kube::Client;

pub use node::NodeSpec;

/// Which images run as local processes, with which program, and which commands each image
/// gives its pods (see [`tools`]: a pod sees only those, never the host's).
#[derive(Debug, Clone, Default)]
pub struct ImageMap {
    programs: BTreeMap<String, PathBuf>,
    tools: BTreeMap<String, PathBuf>,
    commands: BTreeMap<String, Vec<String>>,
}

impl ImageMap {
    /// Maps `image` (exact, or without its tag) to `program`; its pods get no commands (for an
    /// image holding one binary, like a distroless one) unless [`ImageMap::set_commands`] says.
    pub fn insert(&mut self, image: &str, program: impl Into<PathBuf>) {
        self.programs.insert(image.to_string(), program.into());
    }

    /// Maps the runtime image to `program` (`pseudoflow-step`), with the commands
    /// `runtime-image/tools.txt` says the real image has — kubectl among them.
    pub fn insert_runtime(&mut self, image: &str, program: impl Into<PathBuf>) {
        self.insert(image, program);
        self.commands
            .insert(image.to_string(), tools::runtime_commands());
    }

    /// The host commands `image` provides (`sh`, `cat`, ...), linked into its pods' PATH.
    pub fn set_commands(&mut self, image: &str, commands: &[&str]) {
        self.commands.insert(
            image.to_string(),
            commands.iter().map(|c| c.to_string()).collect(),
        );
    }

    /// The commands `image` provides: as declared; `testenv/shell` has a busybox-like set.
    pub fn commands(&self, image: &str) -> Vec<String> {
        match lookup(&self.commands, image) {
            Some(c) => c.clone(),
            None if lookup_key(&self.programs, image) == Some(crate::SHELL_IMAGE) => {
                tools::SHELL_COMMANDS
                    .iter()
                    .map(|c| c.to_string())
                    .collect()
            }
            None => Vec::new(),
        }
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

fn lookup<'a, V>(map: &'a BTreeMap<String, V>, image: &str) -> Option<&'a V> {
    lookup_key(map, image).and_then(|k| map.get(k))
}

/// The key `image` is mapped under: itself, or itself without its tag.
fn lookup_key<'a, V>(map: &'a BTreeMap<String, V>, image: &str) -> Option<&'a str> {
    if let Some((k, _)) = map.get_key_value(image) {
        return Some(k);
    }
    let untagged = image
        .rsplit_once(':')
        .filter(|(_, tag)| !tag.contains('/'))
        .map(|(i, _)| i)?;
    map.get_key_value(untagged).map(|(k, _)| k.as_str())
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
    /// The directory of links to the commands `image` provides (made on first use).
    pub fn image_commands_dir(&self, image: &str) -> Result<PathBuf> {
        let dir = self
            .nodes_dir
            .parent()
            .unwrap_or(&self.nodes_dir)
            .join("images")
            .join(tools::dir_name(image));
        tools::materialize(&dir, &self.images.commands(image))?;
        Ok(dir)
    }

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
