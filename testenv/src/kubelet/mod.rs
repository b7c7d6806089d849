//! The "process kubelet": registers Nodes, keeps them Ready (Lease renewal + status heartbeat),
//! runs the pods bound to them (see [`pod`] and [`runner`]), and serves `pods/exec` and
//! `pods/log` for them (see [`streaming`]). [`Kubelets`] stops one node's kubelet (the node
//! dies: heartbeats stop, its pods' processes are killed, nothing more is reported) and starts
//! it again (the node comes back: pods it ran before are reported failed, as after a reboot).

mod node;
mod pod;
mod pod_status;
mod runner;
mod started;
mod streaming;
pub mod tools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use kube::Client;

pub use node::{node_ready, NodeSpec};

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
    start_kubelets(client, cfg, nodes).await.map(|_| ())
}

/// Like [`start`], returning the handle that stops and restarts single nodes' kubelets.
pub async fn start_kubelets(
    client: Client,
    cfg: KubeletConfig,
    nodes: &[NodeSpec],
) -> Result<Kubelets> {
    // One streaming server for all nodes: the exec path names the pod, which names its node.
    let port = streaming::start(client.clone(), cfg.clone()).await?;
    let kubelets = Kubelets {
        client,
        cfg,
        port,
        specs: nodes.to_vec(),
        running: Mutex::default(),
        died: Mutex::default(),
    };
    for spec in nodes {
        node::prepare_dirs(&kubelets.cfg, &spec.name)?;
        kubelets.start_node(&spec.name).await?;
    }
    Ok(kubelets)
}

/// The kubelets of all simulated nodes, each of which can be stopped and started again.
pub struct Kubelets {
    client: Client,
    cfg: KubeletConfig,
    port: u16,
    specs: Vec<NodeSpec>,
    running: Mutex<BTreeMap<String, NodeKubelet>>,
    /// Per node, the pods its dead kubelets had started (their processes died with it).
    died: Mutex<BTreeMap<String, std::collections::HashSet<String>>>,
}

/// One node's running kubelet: its background tasks and the pods it started.
struct NodeKubelet {
    heartbeat: tokio::task::AbortHandle,
    watch: tokio::task::AbortHandle,
    pods: Arc<pod::NodePods>,
}

impl Kubelets {
    /// Whether `node`'s kubelet runs now.
    pub fn is_running(&self, node: &str) -> bool {
        self.running.lock().unwrap().contains_key(node)
    }

    /// Starts `node`'s kubelet on the current runtime (which must outlive it): registers the
    /// Node (Ready again), renews its heartbeat, runs the pods bound to it. Pods a previous
    /// kubelet of this node started and that have not ended are reported failed: their
    /// processes died with the node. Nothing happens if it runs already.
    pub async fn start_node(&self, node: &str) -> Result<()> {
        let spec = self
            .specs
            .iter()
            .find(|s| s.name == node)
            .ok_or_else(|| anyhow::anyhow!("no simulated node {node}"))?;
        if self.is_running(node) {
            return Ok(());
        }
        node::register(&self.client, spec, self.port).await?;
        let gone = self
            .died
            .lock()
            .unwrap()
            .get(node)
            .cloned()
            .unwrap_or_default();
        let pods = Arc::new(pod::NodePods::new(gone));
        let heartbeat = tokio::spawn(node::heartbeat(
            self.client.clone(),
            node.to_string(),
            self.port,
        ))
        .abort_handle();
        let watch = tokio::spawn(pod::watch_pods(
            self.client.clone(),
            self.cfg.clone(),
            node.to_string(),
            pods.clone(),
        ))
        .abort_handle();
        self.running.lock().unwrap().insert(
            node.to_string(),
            NodeKubelet {
                heartbeat,
                watch,
                pods,
            },
        );
        Ok(())
    }

    /// Stops `node`'s kubelet as if the machine died: no more heartbeats (the node-lifecycle
    /// controller marks the Node NotReady once its grace period passes), no more pod status, and
    /// every pod process it started is killed without its end being reported. Returns the
    /// number of pod processes killed.
    pub fn stop_node(&self, node: &str) -> usize {
        let Some(k) = self.running.lock().unwrap().remove(node) else {
            return 0;
        };
        k.heartbeat.abort();
        k.watch.abort();
        let (killed, started) = k.pods.die();
        self.died
            .lock()
            .unwrap()
            .entry(node.to_string())
            .or_default()
            .extend(started);
        killed
    }
}

/// Runs `call` until it succeeds, as a kubelet retries its status updates: an API server that
/// is restarting (connection refused, 5xx, or 403 while its RBAC caches fill) is waited for, up
/// to two minutes; a 404 (the object is gone) or 422 ends it at once.
pub(crate) async fn with_retries<T, F, Fut>(what: &str, mut call: F) -> kube::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut delay = std::time::Duration::from_millis(200);
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 422 => {
                return Err(kube::Error::Api(e))
            }
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::debug!("{what}: {e}; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Shell-quotes one argument.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

pub(crate) fn path_str(p: &Path) -> String {
    p.display().to_string()
}
