//! Real nodes: kubelet v1.34.4 with containerd, runc, CNI bridge networking and kube-proxy,
//! each node in its own mount, PID, UTS, IPC and network namespaces with its own root (see
//! `testenv/real-node/node.sh`, the node's PID 1), linked to the machine by a veth on a bridge
//! that this cluster owns.
//!
//! Addresses (per cluster, `slot` 0..64 taken with a lock file under `/run/pseudoflow-testenv`):
//! the bridge `pfbr<slot>` has `10.251.<slot>.1/24` (the API server's advertised address), node
//! `i` has `10.251.<slot>.<10+i>`, its pods `10.<128+slot>.<i>.0/24`, which the machine routes
//! through the node (the API server calls admission webhooks at their pods' IPs).
//!
//! Cleanup: the node processes die with the test binary (parent-death signal on `unshare`, whose
//! `--kill-child` takes the node's PID 1, and the kernel then every process of the node's PID
//! namespace); mounts, iptables rules, the CNI bridge and the veths live in the node's
//! namespaces and go with them. What is on the machine — the bridge (and the routes through it),
//! the cgroup directories under `/pseudoflow-<slot>-<i>`, the slot file — is removed by a
//! guardian process that waits for this process to close a pipe (on drop, exit, panic, Ctrl-C or SIGKILL alike), and
//! whatever a guardian could not remove is swept by the next start ([`sweep`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;

use crate::certs::Certs;
use crate::kubelet::NodeSpec;
use crate::procs::Proc;

const RUN_DIR: &str = "/run/pseudoflow-testenv";
const SLOTS: u8 = 64;
const NODE_SH: &str = include_str!("../../real-node/node.sh");
const SYSTEMCTL: &str = include_str!("../../real-node/systemctl");

/// The name real nodes know the runtime image by (`make images`; see
/// `runtime-image/local/build.sh`).
pub const RUNTIME_IMAGE: &str = "docker.io/pseudoflow/runtime:local";
/// The pods' sandbox image on real nodes.
pub const PAUSE_IMAGE: &str = "docker.io/pseudoflow/pause:local";

/// Where `make images` puts the OCI archives.
pub fn images_dir() -> PathBuf {
    if let Ok(d) = std::env::var("PSEUDOFLOW_IMAGES_DIR") {
        return d.into();
    }
    crate::binaries::bin_dir()
        .parent()
        .and_then(Path::parent)
        .map(|p| p.join("images"))
        .unwrap_or_else(|| PathBuf::from("images"))
}

/// The network of one cluster's real nodes: a bridge on the machine and the addresses.
pub struct Network {
    slot: u8,
    /// The bridge's address: what the API server advertises and the nodes route through.
    pub gateway: Ipv4Addr,
    /// Closing it (drop, or this process's end) makes the guardian clean the machine.
    guardian: Option<std::process::ChildStdin>,
}

impl Network {
    /// Takes a free slot (sweeping those whose owner is gone), creates its bridge and starts its
    /// guardian.
    pub fn create() -> Result<Network> {
        check_prerequisites()?;
        std::fs::create_dir_all(RUN_DIR)?;
        sweep();
        let slot = (0..SLOTS)
            .find(|s| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(slot_file(*s))
                    .and_then(|mut f| write!(f, "{}", std::process::id()))
                    .is_ok()
            })
            .context("no free real-node network slot (64 in use) under /run/pseudoflow-testenv")?;
        let net = Network {
            slot,
            gateway: Ipv4Addr::new(10, 251, slot, 1),
            guardian: None,
        };
        let guardian = start_guardian(slot)?;
        let net = Network {
            guardian: Some(guardian),
            ..net
        };
        let br = net.bridge();
        // A bridge left by a guardian that was itself killed.
        let _ = run("ip", &["link", "del", &br]);
        run("ip", &["link", "add", &br, "type", "bridge"])?;
        run(
            "ip",
            &["addr", "add", &format!("{}/24", net.gateway), "dev", &br],
        )?;
        run("ip", &["link", "set", &br, "up"])?;
        Ok(net)
    }

    fn bridge(&self) -> String {
        format!("pfbr{}", self.slot)
    }

    /// Node `i`'s address.
    pub fn node_ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 251, self.slot, 10 + i as u8)
    }

    /// Node `i`'s pod range.
    pub fn pod_cidr(&self, i: usize) -> String {
        format!("10.{}.{}.0/24", 128 + self.slot as u16, i)
    }

    /// All nodes' pod ranges (kube-proxy's clusterCIDR).
    pub fn cluster_cidr(&self) -> String {
        format!("10.{}.0.0/16", 128 + self.slot as u16)
    }

    fn cgroup_root(&self, i: usize) -> String {
        format!("/pseudoflow-{}-{}", self.slot, i)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Closing the pipe lets the guardian clean up (after the nodes' processes are gone).
        self.guardian.take();
    }
}

fn slot_file(slot: u8) -> PathBuf {
    Path::new(RUN_DIR).join(format!("slot-{slot}.pid"))
}

/// The shell commands that remove what a slot leaves on the machine: its bridge, its nodes'
/// veths and cgroup directories (deepest first; retried while the node's processes are still
/// dying). A veth outlives its node while the node's network namespace does: seen when an
/// orphaned TCP socket there kept retransmitting its FIN after the bridge was gone, so the next
/// cluster in the slot failed `RTNETLINK answers: File exists`.
fn cleanup_script(slot: u8) -> String {
    format!(
        r#"ip link del pfbr{slot} 2>/dev/null
for l in /sys/class/net/pfv{slot}n*; do [ -e "$l" ] && ip link del "${{l##*/}}" 2>/dev/null; done
for t in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  left=0
  for d in /sys/fs/cgroup/*/pseudoflow-{slot}-*; do
    [ -d "$d" ] || continue
    find "$d" -depth -type d -exec rmdir {{}} + 2>/dev/null || left=1
    [ -d "$d" ] && left=1
  done
  [ $left = 0 ] && break
  sleep 0.5
done
rm -f {RUN_DIR}/slot-{slot}.pid
"#
    )
}

fn start_guardian(slot: u8) -> Result<std::process::ChildStdin> {
    let script = format!("cat >/dev/null\nsleep 0.5\n{}", cleanup_script(slot));
    let mut cmd = Command::new("setsid");
    cmd.args(["sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().context("starting the real-node guardian")?;
    let stdin = child.stdin.take().context("guardian stdin")?;
    // Reaped by nobody on purpose: it outlives this process when this process is killed.
    std::mem::forget(child);
    Ok(stdin)
}

/// Removes what clusters whose process is gone left on the machine (bridges, cgroups, slot
/// files). Returns how many slots were swept.
pub fn sweep() -> usize {
    let mut n = 0;
    for slot in 0..SLOTS {
        let Ok(pid) = std::fs::read_to_string(slot_file(slot)) else {
            continue;
        };
        if pid
            .trim()
            .parse::<i32>()
            .is_ok_and(crate::leftovers::running)
        {
            continue;
        }
        let _ = Command::new("sh")
            .args(["-c", &cleanup_script(slot)])
            .status();
        n += 1;
    }
    n
}

/// What real nodes need on the machine; a clear error naming what is missing.
pub fn check_prerequisites() -> Result<()> {
    let mut missing = Vec::new();
    for tool in [
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
        "ctr",
        "ip",
        "iptables",
        "unshare",
        "nsenter",
        "setsid",
    ] {
        if !which(tool) {
            missing.push(tool.to_string());
        }
    }
    if !Path::new("/usr/lib/cni/bridge").exists() {
        missing.push("/usr/lib/cni/bridge (containernetworking-plugins)".into());
    }
    if !missing.is_empty() {
        bail!(
            "real nodes need {}: run `make real-node-setup` (testenv/real-node/install.sh)",
            missing.join(", ")
        );
    }
    for b in ["kubelet", "kube-proxy"] {
        crate::binaries::binary(b)?;
    }
    for img in ["runtime.oci.tar", "pause.oci.tar"] {
        let p = images_dir().join(img);
        if !p.is_file() {
            bail!("{} not found: run `make images`", p.display());
        }
    }
    if unsafe { libc::geteuid() } != 0 {
        bail!("real nodes need root (namespaces, mounts, a bridge)");
    }
    Ok(())
}

fn which(tool: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .any(|d| Path::new(d).join(tool).is_file())
}

fn run(prog: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(prog)
        .args(args)
        .output()
        .with_context(|| format!("running {prog}"))?;
    if !out.status.success() {
        bail!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// One running real node.
pub struct RealNode {
    /// The Node's name.
    pub name: String,
    /// Its address on the bridge.
    pub ip: Ipv4Addr,
    /// `<cluster>/nodes/<name>`: `root/` holds the node's own etc, var, run, tmp, root.
    pub dir: PathBuf,
    /// How long from start to the Node Ready.
    pub startup: Duration,
    proc: Proc,
}

impl RealNode {
    /// The node's root directory as the machine sees it (its `/etc` is `root/etc`, ...).
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    /// The PID (as the machine sees it) of the node's PID 1, for `nsenter`.
    pub fn init_pid(&self) -> Option<u32> {
        let pid = self.proc.pid()?;
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// Runs `cmd` inside the node (all its namespaces), returning stdout; fails on a non-zero
    /// exit with stderr.
    pub fn exec(&self, cmd: &str) -> Result<String> {
        let pid = self.init_pid().context("node is not running")?.to_string();
        let out = Command::new("nsenter")
            .args([
                "-t", &pid, "-m", "-u", "-i", "-n", "-p", "--", "sh", "-c", cmd,
            ])
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/k8s/bin",
            )
            .output()?;
        if !out.status.success() {
            bail!(
                "{cmd} on {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Stops the node: its PID 1 and so every process in it.
    pub async fn kill(&mut self) -> Result<()> {
        self.proc.kill().await
    }
}

/// Starts the real nodes `specs` (node `i` of this cluster's network) and waits until each is
/// Ready with its labels.
pub async fn start(
    client: &Client,
    certs: &Certs,
    net: &Network,
    api_port: u16,
    nodes_dir: &Path,
    specs: &[NodeSpec],
) -> Result<Vec<RealNode>> {
    let mut nodes = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let t0 = Instant::now();
        let dir = nodes_dir.join(&spec.name);
        prepare(certs, net, api_port, &dir, spec, i)?;
        let proc = spawn(net, &dir, spec, i)?;
        let mut node = RealNode {
            name: spec.name.clone(),
            ip: net.node_ip(i),
            dir,
            startup: Duration::ZERO,
            proc,
        };
        attach(net, &mut node, i).await?;
        nodes.push(node);
        let _ = t0;
    }
    let t0 = Instant::now();
    for (node, spec) in nodes.iter_mut().zip(specs) {
        wait_ready(client, node, spec, Duration::from_secs(180)).await?;
        node.startup = t0.elapsed();
    }
    Ok(nodes)
}

/// Lays out node `i`'s directory: its root, credentials and the configuration of its
/// kubelet, kube-proxy, containerd and CNI, and the script its PID 1 runs.
fn prepare(
    certs: &Certs,
    net: &Network,
    api_port: u16,
    dir: &Path,
    spec: &NodeSpec,
    i: usize,
) -> Result<()> {
    let root = dir.join("root");
    let etc = root.join("etc");
    node_root(net, &root, spec, i)?;
    credentials(certs, net, api_port, &root, spec, i)?;
    kubelet_config(net, &root, spec, i)?;
    kube_proxy_config(net, &root)?;
    containerd_config(&etc)?;
    cni_config(net, &etc, i)?;
    std::fs::write(dir.join("node.sh"), NODE_SH)?;
    Ok(())
}

/// The node's own root: writable /etc (a copy of the machine's, so a node step changes this copy
/// only), /var, /run, /tmp and /root, its identity and the `systemctl` stand-in.
fn node_root(net: &Network, root: &Path, spec: &NodeSpec, i: usize) -> Result<()> {
    for d in [
        "var/lib/kubelet/pki",
        "var/lib/kube-proxy",
        "run",
        "tmp",
        "root",
        ".pseudoflow/sbin",
    ] {
        std::fs::create_dir_all(root.join(d))?;
    }
    let etc = root.join("etc");
    if !etc.join("passwd").exists() {
        // The node's own /etc, seeded from the machine's (a node step changes this copy only).
        std::fs::create_dir_all(&etc)?;
        run("cp", &["-a", "/etc/.", &etc.display().to_string()])?;
    }
    // Each node its own machine id (the kubelet reports it as the Node's systemUUID source).
    let seed = format!("{}-{}-{}", std::process::id(), net.slot, spec.name);
    let id: String = crate::names_digest(&seed);
    std::fs::write(etc.join("machine-id"), format!("{id}\n"))?;
    let tmp = root.join("tmp");
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))?;
    let sbin = root.join(".pseudoflow/sbin/systemctl");
    std::fs::write(&sbin, SYSTEMCTL)?;
    std::fs::set_permissions(&sbin, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    // The declared stand-ins (crate::standins): node.sh tags the pause image under each name.
    std::fs::create_dir_all(etc.join("pseudoflow"))?;
    let stand_ins: String = crate::standins::STAND_INS
        .iter()
        .map(|s| format!("{}\n", crate::standins::qualified(s.image)))
        .collect();
    std::fs::write(etc.join("pseudoflow/stand-ins"), stand_ins)?;
    std::fs::write(etc.join("hostname"), format!("{}\n", spec.name))?;
    std::fs::write(
        etc.join("hosts"),
        format!("127.0.0.1 localhost\n{} {}\n", net.node_ip(i), spec.name),
    )?;

    Ok(())
}

/// The kubelet's and kube-proxy's client certificates and kubeconfigs, and the kubelet's serving
/// certificate.
fn credentials(
    certs: &Certs,
    net: &Network,
    api_port: u16,
    root: &Path,
    spec: &NodeSpec,
    i: usize,
) -> Result<()> {
    let etc = root.join("etc");
    let pki = etc.join("kubernetes/pki");
    std::fs::create_dir_all(&pki)?;
    std::fs::copy(&certs.ca_crt, pki.join("ca.crt"))?;
    let ip = net.node_ip(i);
    crate::certs::issue(
        certs,
        &pki,
        "kubelet-client",
        &format!("/O=system:nodes/CN=system:node:{}", spec.name),
        "extendedKeyUsage=clientAuth\n",
    )?;
    crate::certs::issue(
        certs,
        &pki,
        "kube-proxy",
        "/CN=system:kube-proxy",
        "extendedKeyUsage=clientAuth\n",
    )?;
    // The serving certificate carries the node's IP: the API server verifies it for logs/exec.
    crate::certs::issue(
        certs,
        &root.join("var/lib/kubelet/pki"),
        "kubelet",
        &format!("/CN={}", spec.name),
        &format!(
            "subjectAltName=IP:{ip},DNS:{}\nextendedKeyUsage=serverAuth\n",
            spec.name
        ),
    )?;
    let server = format!("https://{}:{api_port}", net.gateway);
    let kubeconfig = |user: &str| {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: {server}\n    certificate-authority: /etc/kubernetes/pki/ca.crt\nusers:\n- name: {user}\n  user:\n    client-certificate: /etc/kubernetes/pki/{user}.crt\n    client-key: /etc/kubernetes/pki/{user}.key\ncontexts:\n- name: default\n  context: {{cluster: kubernetes, user: {user}}}\ncurrent-context: default\n"
        )
    };
    std::fs::write(
        etc.join("kubernetes/kubelet.conf"),
        kubeconfig("kubelet-client"),
    )?;
    std::fs::write(
        etc.join("kubernetes/kube-proxy.conf"),
        kubeconfig("kube-proxy"),
    )?;
    Ok(())
}

/// The kubelet's configuration: the settings this machine class needs (cgroup v1, no systemd,
/// a disk shared with everything else) and the node's taints.
fn kubelet_config(net: &Network, root: &Path, spec: &NodeSpec, i: usize) -> Result<()> {
    let taints: String = spec
        .taints
        .iter()
        .map(|(k, e)| format!("- {{key: \"{k}\", effect: {e}}}\n"))
        .collect();
    let taints = if taints.is_empty() {
        "[]\n".to_string()
    } else {
        format!("\n{taints}")
    };
    std::fs::write(
        root.join("var/lib/kubelet/config.yaml"),
        format!(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 on this machine class, and no systemd in the node.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: /etc/kubernetes/pki/ca.crt}}
authorization: {{mode: AlwaysAllow}}
tlsCertFile: /var/lib/kubelet/pki/kubelet.crt
tlsPrivateKeyFile: /var/lib/kubelet/pki/kubelet.key
readOnlyPort: 0
healthzPort: 0
failSwapOn: false
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
registerWithTaints: {taints}nodeStatusUpdateFrequency: 10s
syncFrequency: 10s
serializeImagePulls: false
# The machine's disk is shared with everything else: never evict or collect images for it.
evictionHard: {{memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
maxPods: 50
podPidsLimit: -1
"#,
            cgroup_root = net.cgroup_root(i)
        ),
    )?;
    Ok(())
}

/// kube-proxy in iptables mode, leaving the machine-wide conntrack settings alone.
fn kube_proxy_config(net: &Network, root: &Path) -> Result<()> {
    std::fs::write(
        root.join("var/lib/kube-proxy/config.yaml"),
        format!(
            r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: {cidr}
clientConnection:
  kubeconfig: /etc/kubernetes/kube-proxy.conf
# Leave the (machine-wide) conntrack sysctls alone.
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
"#,
            cidr = net.cluster_cidr()
        ),
    )?;
    Ok(())
}

/// containerd's CRI settings: the local pause image and the OOM-score restriction runc needs here.
fn containerd_config(etc: &Path) -> Result<()> {
    std::fs::create_dir_all(etc.join("containerd"))?;
    std::fs::write(
        etc.join("containerd/config.toml"),
        format!(
            r#"version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # Without it runc fails with "can't get final child's PID from pipe" (no CAP_SYS_RESOURCE).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
"#
        ),
    )?;
    Ok(())
}

/// The CNI bridge for node `i`'s pod range.
fn cni_config(net: &Network, etc: &Path, i: usize) -> Result<()> {
    let cni = etc.join("cni/net.d");
    if cni.exists() {
        std::fs::remove_dir_all(&cni)?;
    }
    std::fs::create_dir_all(&cni)?;
    std::fs::write(
        cni.join("10-pseudoflow.conflist"),
        format!(
            r#"{{"cniVersion": "1.0.0", "name": "pseudoflow", "plugins": [
  {{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
    "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{}"}}]], "routes": [{{"dst": "0.0.0.0/0"}}]}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}}
]}}
"#,
            net.pod_cidr(i)
        ),
    )?;
    Ok(())
}

fn spawn(net: &Network, dir: &Path, spec: &NodeSpec, i: usize) -> Result<Proc> {
    let env: Vec<(String, String)> = [
        ("NODE_NAME", spec.name.clone()),
        ("NODE_DIR", dir.display().to_string()),
        ("NODE_IP", net.node_ip(i).to_string()),
        ("NODE_PREFIX", "24".into()),
        ("GATEWAY", net.gateway.to_string()),
        ("K8S_BIN", crate::binaries::bin_dir().display().to_string()),
        ("IMAGES_DIR", images_dir().display().to_string()),
        ("CGROUP_ROOT", net.cgroup_root(i)),
        ("PAUSE_IMAGE", PAUSE_IMAGE.to_string()),
        ("KUBELET_EXTRA_ARGS", "--v=1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let args: Vec<String> = [
        "--mount",
        "--pid",
        "--uts",
        "--ipc",
        "--net",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "sh",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([dir.join("node.sh").display().to_string()])
    .collect();
    Proc::spawn_with_env(
        &format!("node-{}", spec.name),
        Path::new("/usr/bin/unshare"),
        &args,
        &env,
        &dir.join("node.log"),
    )
}

/// Moves one end of a new veth into the node's network namespace as `eth0`, puts the other on
/// the bridge, and routes the node's pod range to the node.
async fn attach(net: &Network, node: &mut RealNode, i: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        if let Some(pid) = node.init_pid() {
            break pid;
        }
        if !node.proc.running() {
            bail!(
                "real node {} exited at once; see {}",
                node.name,
                node.dir.join("node.log").display()
            );
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "real node {} did not start",
            node.name
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let host_end = format!("pfv{}n{i}", net.slot);
    // One left by a node whose network namespace outlived it (see cleanup_script).
    let _ = run("ip", &["link", "del", &host_end]);
    run(
        "ip",
        &[
            "link",
            "add",
            &host_end,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &pid.to_string(),
        ],
    )?;
    run("ip", &["link", "set", &host_end, "master", &net.bridge()])?;
    run("ip", &["link", "set", &host_end, "up"])?;
    // The machine reaches the node's pods through the node: the API server calls admission
    // webhooks at their pod IPs (--enable-aggregator-routing). The route goes with the bridge.
    let (cidr, via) = (net.pod_cidr(i), net.node_ip(i).to_string());
    run(
        "ip",
        &["route", "replace", &cidr, "via", &via, "dev", &net.bridge()],
    )?;
    Ok(())
}

async fn wait_ready(
    client: &Client,
    node: &mut RealNode,
    spec: &NodeSpec,
    timeout: Duration,
) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + timeout;
    let mut labelled = spec.labels.is_empty();
    loop {
        if !node.proc.running() {
            bail!(
                "real node {} stopped; its log:\n{}",
                node.name,
                tail(&node.dir.join("node.log"), 30)
            );
        }
        if let Ok(Some(n)) = api.get_opt(&node.name).await {
            if !labelled {
                // kubelet may not set node-role labels itself (--node-labels refuses them).
                let labels: BTreeMap<_, _> = spec.labels.clone();
                let patch = serde_json::json!({"metadata": {"labels": labels}});
                labelled = api
                    .patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_ok();
            }
            if labelled && crate::kubelet::node_ready(&n) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            let root = node.root();
            bail!(
                "real node {} not Ready after {timeout:?}.\nnode.log:\n{}\nkubelet.log:\n{}\ncontainerd.log:\n{}",
                node.name,
                tail(&node.dir.join("node.log"), 20),
                tail(&root.join("var/log/kubelet.log"), 30),
                tail(&root.join("var/log/containerd.log"), 15),
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({e})"));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
