//! [`TestEnv`]: one running cluster. Tests in a binary share one ([`shared`]), each in its own
//! namespace; the cluster's background work runs on a dedicated runtime thread so it outlives
//! any single test's runtime, and every process dies with the test binary. For failure tests a
//! cluster can crash and restart its control-plane processes ([`Component`]) on the same data,
//! stop and start one node's kubelet, and run further processes (a controller binary) against
//! it ([`TestEnv::spawn`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;

pub use crate::kubelet::NodeSpec;
use crate::kubelet::{ImageMap, KubeletConfig, Kubelets};
use crate::procs::Proc;

/// A control-plane process of the cluster, to crash and restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// etcd (restarted on the same data directory and ports).
    Etcd,
    /// kube-apiserver (restarted on the same port, certificates and etcd).
    ApiServer,
    /// kube-controller-manager.
    ControllerManager,
    /// kube-scheduler.
    Scheduler,
}

impl Component {
    /// The process name, as in `logs/<name>.log`.
    pub fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::ApiServer => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
        }
    }
}

/// Label kubeadm puts on control-plane nodes.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// `kubeadm-flags.env` as [`TestEnv::seed_kubeadm_files`] writes it.
pub const KUBEADM_FLAGS: &str = "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock --resolv-conf=/run/systemd/resolve/resolv.conf\"\n";

/// How to build a cluster.
#[derive(Debug, Clone)]
pub struct Options {
    /// The nodes to simulate (names, labels, roles).
    pub nodes: Vec<NodeSpec>,
    /// Images run as local processes; the shell and probe test images are always included.
    pub images: ImageMap,
    /// Nodes to run as real nodes (kubelet, containerd, runc, CNI, kube-proxy in their own
    /// namespaces; see [`crate::real_node`]) beside the simulated `nodes`. With any, the API
    /// server listens on all addresses and advertises the real nodes' bridge address.
    pub real_nodes: Vec<NodeSpec>,
}

impl Default for Options {
    /// Three nodes: `cp-0` (control plane, tainted like kubeadm), `worker-0`, `worker-1`.
    fn default() -> Self {
        Options {
            nodes: vec![
                NodeSpec::control_plane("cp-0"),
                NodeSpec::worker("worker-0"),
                NodeSpec::worker("worker-1"),
            ],
            images: ImageMap::default(),
            real_nodes: vec![],
        }
    }
}

impl Options {
    /// `n` nodes: one control plane and `n - 1` workers.
    pub fn with_nodes(n: usize) -> Self {
        let mut nodes = vec![NodeSpec::control_plane("cp-0")];
        nodes.extend((0..n.saturating_sub(1)).map(|i| NodeSpec::worker(&format!("worker-{i}"))));
        Options {
            nodes,
            ..Default::default()
        }
    }

    /// `simulated` simulated nodes and `real` real ones ([`crate::real_node`]); with no
    /// simulated node, the first real one is the control plane (`cp-0`, labelled and tainted
    /// like kubeadm), the others are `node-<i>`; else the real ones are all `real-<i>` workers.
    pub fn with_real_nodes(simulated: usize, real: usize) -> Self {
        let mut o = if simulated == 0 {
            Options {
                nodes: vec![],
                ..Default::default()
            }
        } else {
            Self::with_nodes(simulated)
        };
        o.real_nodes = (0..real)
            .map(|i| match (simulated, i) {
                (0, 0) => NodeSpec::control_plane("cp-0"),
                (0, i) => NodeSpec::worker(&format!("node-{i}")),
                (_, i) => NodeSpec::worker(&format!("real-{i}")),
            })
            .collect();
        o
    }
}

/// A running cluster.
pub struct TestEnv {
    dir: PathBuf,
    kubeconfig: PathBuf,
    kubelets: KubeletConfig,
    nodes: Vec<String>,
    control_planes: Vec<String>,
    /// How long startup took, to all nodes Ready.
    pub startup: Duration,
    /// The control-plane processes by name.
    procs: Vec<(String, Arc<tokio::sync::Mutex<Proc>>)>,
    kubelet_handle: Arc<Kubelets>,
    /// The runtime the cluster's background work (kubelets, restarted processes) runs on.
    runtime: tokio::runtime::Handle,
    /// The real nodes (dropped, so stopped, before their network).
    real_nodes: Vec<crate::real_node::RealNode>,
    /// Their bridge on the machine and its guardian.
    _network: Option<crate::real_node::Network>,
    /// The cluster's directory, removed last (fields drop in this order): after every process
    /// that writes in it was stopped, the real nodes waited for ([`Drop`]).
    _tmp: Option<tempfile::TempDir>,
}

/// Longest a dropped cluster waits for its real nodes to be gone before its directory goes.
const REAL_NODES_GONE: Duration = Duration::from_secs(10);

impl Drop for TestEnv {
    /// Stops the real nodes and waits (at most [`REAL_NODES_GONE`]) until each node's PID 1 is
    /// gone, then lets the fields go, the directory last. The directory used to be removed
    /// first, while the nodes still ran and wrote in it: on a loaded machine a file a node wrote
    /// meanwhile left `nodes/<node>/root` behind (`tests/real_nodes.rs` saw it).
    fn drop(&mut self) {
        let inits: Vec<u32> = self
            .real_nodes
            .iter()
            .filter_map(|n| n.init_pid())
            .collect();
        self.real_nodes.clear();
        let deadline = Instant::now() + REAL_NODES_GONE;
        let alive = |pid: &u32| Path::new(&format!("/proc/{pid}")).exists();
        while inits.iter().any(alive) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn probe_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    // Test binaries live in target/<profile>/deps; the probe in target/<profile>.
    for d in [
        dir.clone(),
        dir.parent().map(Path::to_path_buf).unwrap_or_default(),
    ] {
        let p = d.join("testenv-probe");
        if p.is_file() {
            return p;
        }
    }
    PathBuf::from("testenv-probe")
}

impl TestEnv {
    /// Starts a cluster in a fresh temporary directory and waits until every node is Ready.
    pub async fn start(opts: Options) -> Result<TestEnv> {
        let swept = crate::leftovers::sweep(&std::env::temp_dir());
        if swept > 0 {
            tracing::info!("removed {swept} cluster directories of test runs that are gone");
        }
        let tmp = tempfile::Builder::new()
            .prefix(crate::leftovers::PREFIX)
            .tempdir()?;
        crate::leftovers::claim(tmp.path())?;
        let mut env = Self::start_in(tmp.path(), opts).await?;
        env._tmp = Some(tmp);
        Ok(env)
    }

    /// Starts a cluster keeping its state in `dir`.
    pub async fn start_in(dir: &Path, mut opts: Options) -> Result<TestEnv> {
        let t0 = Instant::now();
        let network = if opts.real_nodes.is_empty() {
            None
        } else {
            Some(crate::real_node::Network::create()?)
        };
        let advertise = network.as_ref().map(|n| n.gateway);
        let certs = crate::certs::generate_with(&dir.join("pki"), advertise.as_slice())?;
        let cp = crate::controlplane::start_with(dir, &certs, advertise).await?;
        opts.images.insert(crate::SHELL_IMAGE, "/bin/sh");
        opts.images.insert(crate::PROBE_IMAGE, probe_binary());
        let kubelets = KubeletConfig {
            api_port: cp.api_port,
            ca_crt: certs.ca_crt.clone(),
            serving_crt: certs.kubelet_crt.clone(),
            serving_key: certs.kubelet_key.clone(),
            nodes_dir: dir.join("nodes"),
            images: Arc::new(opts.images),
        };
        let client = crate::controlplane::client_for(&cp.kubeconfig).await?;
        let kubelet_handle = Arc::new(
            crate::kubelet::start_kubelets(client.clone(), kubelets.clone(), &opts.nodes).await?,
        );
        let real_nodes = match &network {
            Some(net) => {
                crate::real_node::start(
                    &client,
                    &certs,
                    net,
                    cp.api_port,
                    &dir.join("nodes"),
                    &opts.real_nodes,
                )
                .await?
            }
            None => vec![],
        };
        let nodes: Vec<String> = opts
            .nodes
            .iter()
            .chain(&opts.real_nodes)
            .map(|n| n.name.clone())
            .collect();
        let control_planes = opts
            .nodes
            .iter()
            .chain(&opts.real_nodes)
            .filter(|n| n.labels.contains_key(CONTROL_PLANE_LABEL))
            .map(|n| n.name.clone())
            .collect();
        let mut env = TestEnv {
            dir: dir.to_path_buf(),
            _tmp: None,
            kubeconfig: cp.kubeconfig.clone(),
            kubelets,
            nodes,
            control_planes,
            startup: Duration::ZERO,
            procs: cp
                .procs
                .into_iter()
                .map(|p| (p.name.clone(), Arc::new(tokio::sync::Mutex::new(p))))
                .collect(),
            kubelet_handle,
            runtime: tokio::runtime::Handle::current(),
            real_nodes,
            _network: network,
        };
        env.wait_until_usable(&client, Duration::from_secs(90))
            .await?;
        env.startup = t0.elapsed();
        Ok(env)
    }

    /// Nodes Ready and the `default` ServiceAccount created (pods can be admitted).
    async fn wait_until_usable(&self, client: &Client, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let nodes: Api<Node> = Api::all(client.clone());
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        loop {
            let ready = nodes
                .list(&ListParams::default())
                .await
                .map(|l| l.items.iter().filter(|n| node_ready(n)).count())
                .unwrap_or(0);
            let sa = sas.get_opt("default").await.ok().flatten().is_some();
            if ready == self.nodes.len() && sa {
                return Ok(());
            }
            if Instant::now() > deadline {
                // The logs go with the cluster's directory: what they end with is told here.
                let logs = self.dir.join("logs");
                let tail = |name: &str| {
                    let text = std::fs::read_to_string(logs.join(name)).unwrap_or_default();
                    let last: Vec<&str> = text.lines().rev().take(5).collect();
                    let last: Vec<&str> = last.into_iter().rev().collect();
                    format!("\n--- {name} ends:\n{}", last.join("\n"))
                };
                anyhow::bail!(
                    "cluster not usable after {timeout:?}: {ready}/{} nodes Ready, default ServiceAccount: {sa}; logs in {}{}{}",
                    self.nodes.len(),
                    logs.display(),
                    tail("kube-controller-manager.log"),
                    tail("kube-scheduler.log")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A client with cluster-admin rights, on the caller's runtime.
    pub async fn client(&self) -> Result<Client> {
        crate::controlplane::client_for(&self.kubeconfig).await
    }

    /// The admin kubeconfig file.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The cluster's state directory (logs under `logs/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA that signs the client certificate the API server presents to admission webhooks
    /// (Common Name [`crate::certs::WEBHOOK_CLIENT_CN`]): what a webhook checking its caller
    /// trusts. It is the cluster CA, which signs users' certificates too, so check the name.
    pub fn webhook_client_ca(&self) -> PathBuf {
        self.dir.join("pki").join("ca.crt")
    }

    /// Names of the simulated nodes.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Gives every node the files a kubeadm node has and the seed flows edit:
    /// `/etc/kubernetes/kubelet.conf` (plus `controller-manager.conf` and `scheduler.conf` on
    /// control-plane nodes) pointing at `api_server`, and `/var/lib/kubelet/kubeadm-flags.env`.
    /// A real node keeps its own `kubelet.conf` (its kubelet uses it) and gets the others only
    /// where missing; its kubelet reads neither `kubeadm-flags.env` nor the control-plane files
    /// (its flags come from `real-node/node.sh`, the control plane runs on the machine).
    pub fn seed_kubeadm_files(&self, api_server: &str) -> Result<()> {
        let conf = format!("apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: {api_server}\n  name: kubernetes\n");
        for node in &self.nodes {
            if let Some(real) = self.real_node(node) {
                let root = real.root();
                let mut files = vec![("var/lib/kubelet/kubeadm-flags.env", KUBEADM_FLAGS)];
                if self.control_planes.contains(node) {
                    files.push(("etc/kubernetes/controller-manager.conf", &conf));
                    files.push(("etc/kubernetes/scheduler.conf", &conf));
                }
                for (f, text) in files {
                    let p = root.join(f);
                    if !p.exists() {
                        std::fs::create_dir_all(p.parent().unwrap())?;
                        std::fs::write(p, text)?;
                    }
                }
                continue;
            }
            let root = self.node_root(node);
            std::fs::create_dir_all(root.join("etc/kubernetes"))?;
            std::fs::create_dir_all(root.join("var/lib/kubelet"))?;
            std::fs::write(root.join("etc/kubernetes/kubelet.conf"), &conf)?;
            if self.control_planes.contains(node) {
                std::fs::write(root.join("etc/kubernetes/controller-manager.conf"), &conf)?;
                std::fs::write(root.join("etc/kubernetes/scheduler.conf"), &conf)?;
            }
            std::fs::write(
                root.join("var/lib/kubelet/kubeadm-flags.env"),
                KUBEADM_FLAGS,
            )?;
        }
        Ok(())
    }

    /// A real node by name.
    pub fn real_node(&self, name: &str) -> Option<&crate::real_node::RealNode> {
        self.real_nodes.iter().find(|n| n.name == name)
    }

    /// The real nodes.
    pub fn real_nodes(&self) -> &[crate::real_node::RealNode] {
        &self.real_nodes
    }

    /// A node's root directory: what its pods see at `hostPath: /`.
    pub fn node_root(&self, node: &str) -> PathBuf {
        self.kubelets.node_root(node)
    }

    /// The `nsenter`/`systemctl` calls recorded on a node, one line each:
    /// `<unix time> <tool> <args>`.
    pub fn node_calls(&self, node: &str) -> Vec<String> {
        std::fs::read_to_string(self.kubelets.calls_log(node))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The combined output of a pod that ran as a process.
    pub fn pod_log(&self, node: &str, namespace: &str, pod: &str) -> String {
        std::fs::read_to_string(
            self.kubelets
                .nodes_dir
                .join(node)
                .join("pods")
                .join(format!("{namespace}_{pod}"))
                .join("log"),
        )
        .unwrap_or_default()
    }

    fn component(&self, c: Component) -> Result<Arc<tokio::sync::Mutex<Proc>>> {
        self.procs
            .iter()
            .find(|(name, _)| name == c.name())
            .map(|(_, p)| p.clone())
            .ok_or_else(|| anyhow::anyhow!("no process {}", c.name()))
    }

    /// Crashes a control-plane process: SIGKILL, no graceful shutdown. It stays down until
    /// [`TestEnv::start_component`].
    pub async fn kill_component(&self, c: Component) -> Result<()> {
        let p = self.component(c)?;
        self.runtime
            .spawn(async move { p.lock().await.kill().await })
            .await?
    }

    /// Starts a control-plane process again as it was first started (same data directory,
    /// ports and certificates), then waits up to `timeout` until the API server is ready again
    /// (its `/readyz` includes etcd). Returns how long that took.
    pub async fn start_component(&self, c: Component, timeout: Duration) -> Result<Duration> {
        let t0 = Instant::now();
        let p = self.component(c)?;
        // Started from the cluster's runtime: a process dies with the thread that started it.
        self.runtime
            .spawn(async move { p.lock().await.respawn().await })
            .await??;
        self.wait_ready(timeout).await?;
        Ok(t0.elapsed())
    }

    /// [`kill_component`](Self::kill_component), `down` later
    /// [`start_component`](Self::start_component); returns how long the API server took to be
    /// ready again after the start.
    pub async fn restart_component(&self, c: Component, down: Duration) -> Result<Duration> {
        self.kill_component(c).await?;
        tokio::time::sleep(down).await;
        self.start_component(c, Duration::from_secs(90)).await
    }

    /// Waits until the API server answers `/readyz` with `ok`.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(client) = self.client().await {
                let req = http::Request::get("/readyz").body(Vec::new())?;
                if client
                    .request_text(req)
                    .await
                    .is_ok_and(|t| t.trim() == "ok")
                {
                    return Ok(());
                }
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "kube-apiserver not ready after {timeout:?}; logs in {}",
                self.dir.join("logs").display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops `node`'s kubelet as if the machine died (see [`Kubelets::stop_node`]); returns how
    /// many pod processes died with it.
    pub fn stop_node(&self, node: &str) -> usize {
        self.kubelet_handle.stop_node(node)
    }

    /// Starts `node`'s kubelet again (the Node turns Ready; pods that ran on it when it died are
    /// reported failed).
    pub async fn start_node(&self, node: &str) -> Result<()> {
        let (kubelets, node) = (self.kubelet_handle.clone(), node.to_string());
        // On the cluster's runtime, which outlives any test's.
        self.runtime
            .spawn(async move { kubelets.start_node(&node).await })
            .await?
    }

    /// Starts `program args` as a child process that reaches this cluster as admin
    /// (`KUBECONFIG` set) with `env` added, its output in `logs/<name>.log`. It runs until it
    /// exits, is killed through the returned [`Proc`], or the [`Proc`] is dropped; start it
    /// from a thread that lives as long as it should (it gets SIGKILL when that thread ends).
    pub fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<Proc> {
        let mut all = vec![(
            "KUBECONFIG".to_string(),
            self.kubeconfig.display().to_string(),
        )];
        all.extend(env.iter().cloned());
        Proc::spawn_with_env(
            name,
            program,
            args,
            &all,
            &self.dir.join("logs").join(format!("{name}.log")),
        )
    }

    /// Creates a fresh namespace `<prefix>-<n>` for one test.
    pub async fn namespace(&self, prefix: &str) -> Result<String> {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id() % 10000);
        let client = self.client().await?;
        let ns: Namespace = serde_json::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .context("creating namespace")?;
        // Pods need the namespace's default ServiceAccount, made by the controller-manager.
        let sas: Api<ServiceAccount> = Api::namespaced(client, &name);
        let deadline = Instant::now() + Duration::from_secs(30);
        while sas.get_opt("default").await?.is_none() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "no default ServiceAccount in {name}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(name)
    }
}

/// Whether a Node reports Ready=True (the condition a kubelet keeps fresh).
pub use crate::kubelet::node_ready;

/// The cluster shared by all tests of one test binary (default [`Options`]), started on first
/// use on its own runtime thread. Fails with a clear message when the binaries are missing.
pub fn shared() -> Result<&'static TestEnv, String> {
    shared_with(Options::default)
}

/// Like [`shared`], with options (e.g. image mappings) chosen by the test binary. The first call
/// in a binary decides the options; a binary should always pass the same ones.
pub fn shared_with(
    options: impl FnOnce() -> Options + Send + 'static,
) -> Result<&'static TestEnv, String> {
    static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("testenv".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("runtime");
                let result = rt
                    .block_on(TestEnv::start(options()))
                    .map_err(|e| format!("{e:#}"));
                let _ = tx.send(result);
                // Keep the runtime (and the kubelets on it) alive for the whole test binary.
                rt.block_on(std::future::pending::<()>());
            })
            .expect("testenv thread");
        rx.recv()
            .unwrap_or_else(|_| Err("testenv thread died".into()))
    })
    .as_ref()
    .map_err(Clone::clone)
}
