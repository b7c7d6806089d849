//! Starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback, and
//! waiting until the API server is ready.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::binaries::binary;
use crate::certs::Certs;
use crate::procs::Proc;

/// The running control plane.
pub struct ControlPlane {
    /// The API server's port on 127.0.0.1.
    pub api_port: u16,
    /// An admin kubeconfig for it.
    pub kubeconfig: PathBuf,
    /// The processes, stopped with the control plane.
    pub procs: Vec<Proc>,
}

/// `N` ports nobody listens on right now, all different (held together while they are chosen).
pub fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut ports = [0; N];
    for (port, l) in ports.iter_mut().zip(&listeners) {
        *port = l.local_addr()?.port();
    }
    Ok(ports)
}

/// How often etcd and the API server are started, on new ports each time, when one exits
/// during startup: a free port is free only until another process, or an outgoing
/// connection, takes it, and with many test binaries on one machine that happens. A start that
/// fails for another reason fails the same way each time, and says why.
const START_ATTEMPTS: usize = 3;

/// Whether a start failed because a process exited during it (a port taken meanwhile, above
/// all), not because the API server never became ready.
fn exited_early(e: &anyhow::Error, logs: &Path) -> bool {
    lost_a_port(logs) || e.to_string().contains("exited during startup")
}

/// Whether a start failed because a port was taken meanwhile (its log says so).
fn lost_a_port(logs: &Path) -> bool {
    ["etcd.log", "kube-apiserver.log"].iter().any(|f| {
        std::fs::read_to_string(logs.join(f)).is_ok_and(|t| t.contains("address already in use"))
    })
}

/// Moves the logs and etcd's data of a failed start aside, so that the next one starts clean.
fn set_aside(dir: &Path, logs: &Path, attempt: usize) -> Result<()> {
    for f in ["etcd.log", "kube-apiserver.log"] {
        let from = logs.join(f);
        if from.exists() {
            std::fs::rename(&from, logs.join(format!("{f}.{attempt}")))?;
        }
    }
    let etcd = dir.join("etcd");
    if etcd.exists() {
        std::fs::remove_dir_all(etcd)?;
    }
    Ok(())
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Writes an admin kubeconfig for `https://127.0.0.1:port`.
pub fn write_kubeconfig(path: &Path, port: u16, certs: &Certs) -> Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: testenv\n  context: {{cluster: testenv, user: admin}}\ncurrent-context: testenv\n",
        s(&certs.ca_crt),
        s(&certs.admin_crt),
        s(&certs.admin_key)
    );
    std::fs::write(path, text)?;
    Ok(())
}

/// A client for a kubeconfig file, on the caller's runtime.
pub async fn client_for(kubeconfig: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Starts everything in `dir` and waits for `/readyz`.
pub async fn start(dir: &Path, certs: &Certs) -> Result<ControlPlane> {
    start_with(dir, certs, None).await
}

/// Like [`start`]; with `advertise`, the API server listens on all addresses (not only
/// loopback) and advertises that one (the `kubernetes` Service's endpoint): real nodes, in
/// their own network namespaces, reach it there.
pub async fn start_with(
    dir: &Path,
    certs: &Certs,
    advertise: Option<std::net::Ipv4Addr>,
) -> Result<ControlPlane> {
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut attempt = 1;
    let (api_port, mut procs) = loop {
        match start_api(dir, certs, advertise, &logs).await {
            Ok(started) => break started,
            Err(e) if attempt < START_ATTEMPTS && exited_early(&e, &logs) => {
                tracing::warn!("testenv: {e}; starting again on new ports");
                set_aside(dir, &logs, attempt)?;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    let kubeconfig = dir.join("admin.kubeconfig");
    let kc = s(&kubeconfig);
    let kcm_args = controller_manager_args(dir, certs, &kc)?;
    let sched_args = scheduler_args(dir, &kc)?;
    procs.push(Proc::spawn(
        "kube-controller-manager",
        &binary("kube-controller-manager")?,
        &kcm_args,
        &logs.join("kube-controller-manager.log"),
    )?);
    procs.push(Proc::spawn(
        "kube-scheduler",
        &binary("kube-scheduler")?,
        &sched_args,
        &logs.join("kube-scheduler.log"),
    )?);
    Ok(ControlPlane {
        api_port,
        kubeconfig,
        procs,
    })
}

/// Starts etcd and the API server on ports chosen now, and waits for `/readyz`; returns the
/// API server's port and both processes (stopped when dropped, also on an error).
async fn start_api(
    dir: &Path,
    certs: &Certs,
    advertise: Option<std::net::Ipv4Addr>,
    logs: &Path,
) -> Result<(u16, Vec<Proc>)> {
    let [etcd_port, peer_port, api_port] = free_ports()?;
    let kubeconfig = dir.join("admin.kubeconfig");
    write_kubeconfig(&kubeconfig, api_port, certs)?;
    write_admission_config(dir, certs)?;
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let mut procs = vec![
        Proc::spawn(
            "etcd",
            &binary("etcd")?,
            &etcd_args(dir, &etcd_url, peer_port),
            &logs.join("etcd.log"),
        )?,
        Proc::spawn(
            "kube-apiserver",
            &binary("kube-apiserver")?,
            &apiserver_args(dir, certs, &etcd_url, api_port, advertise),
            &logs.join("kube-apiserver.log"),
        )?,
    ];
    wait_ready(&kubeconfig, &mut procs, Duration::from_secs(60)).await?;
    Ok((api_port, procs))
}

/// Where [`write_admission_config`] writes the API server's admission configuration.
fn admission_config(dir: &Path) -> PathBuf {
    dir.join("admission-config.yaml")
}

/// The API server's admission configuration: it presents the client certificate
/// `certs.webhook_client_crt` to every admission webhook (kubeconfig user `*`), as a cluster
/// whose webhooks check their caller is configured (Kubernetes' "Authenticate apiservers").
fn write_admission_config(dir: &Path, certs: &Certs) -> Result<()> {
    let kubeconfig = dir.join("webhook-client.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: '*'\n  user:\n    client-certificate: {}\n    client-key: {}\n",
            s(&certs.webhook_client_crt),
            s(&certs.webhook_client_key)
        ),
    )?;
    let plugin = |name: &str| {
        format!(
            "- name: {name}\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {}\n",
            s(&kubeconfig)
        )
    };
    std::fs::write(
        admission_config(dir),
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n{}{}",
            plugin("ValidatingAdmissionWebhook"),
            plugin("MutatingAdmissionWebhook")
        ),
    )
    .context("writing the admission configuration")
}

/// etcd on loopback, without fsync (test data only).
fn etcd_args(dir: &Path, etcd_url: &str, peer_port: u16) -> Vec<String> {
    vec![
        format!("--data-dir={}", s(&dir.join("etcd"))),
        format!("--listen-client-urls={etcd_url}"),
        format!("--advertise-client-urls={etcd_url}"),
        format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
        format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
        format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
        "--unsafe-no-fsync".into(),
        "--log-level=warn".into(),
    ]
}

/// Whether kube-apiserver serves `/debug/pprof` (`PSEUDOFLOW_TESTENV_PROFILING=1`).
fn profiling() -> bool {
    std::env::var("PSEUDOFLOW_TESTENV_PROFILING").is_ok_and(|v| v == "1")
}

/// kube-apiserver on loopback with RBAC, service-account tokens, and the kubelet client the
/// simulated kubelets' streaming server verifies.
fn apiserver_args(
    dir: &Path,
    certs: &Certs,
    etcd_url: &str,
    api_port: u16,
    advertise: Option<std::net::Ipv4Addr>,
) -> Vec<String> {
    let real_nodes = advertise.is_some();
    let (bind, advertise) = match advertise {
        Some(ip) => ("0.0.0.0".to_string(), ip.to_string()),
        None => ("127.0.0.1".to_string(), "127.0.0.1".to_string()),
    };
    let mut args = vec![
        format!("--etcd-servers={etcd_url}"),
        format!("--bind-address={bind}"),
        format!("--advertise-address={advertise}"),
        format!("--secure-port={api_port}"),
        format!("--tls-cert-file={}", s(&certs.server_crt)),
        format!("--tls-private-key-file={}", s(&certs.server_key)),
        format!("--client-ca-file={}", s(&certs.ca_crt)),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", s(&certs.sa_pub)),
        format!("--service-account-signing-key-file={}", s(&certs.sa_key)),
        // The seed clusters use 100.64.0.0/16 for Services (NodeLocal DNS at 100.64.0.10).
        "--service-cluster-ip-range=100.64.0.0/16".into(),
        // Node: real nodes' kubelets (system:node:<name>) get what a kubelet needs.
        "--authorization-mode=Node,RBAC".into(),
        // As on hardened clusters: setting blockOwnerDeletion needs rights on the owner's
        // finalizers, so RBAC tests catch a controller that lacks them.
        "--enable-admission-plugins=OwnerReferencesPermissionEnforcement".into(),
        // Admission webhooks are called with a client certificate (see write_admission_config).
        format!(
            "--admission-control-config-file={}",
            s(&admission_config(dir))
        ),
        "--allow-privileged=true".into(),
        // Off as on hardened clusters; `PSEUDOFLOW_TESTENV_PROFILING=1` turns it on for a
        // benchmark that profiles the API server (bench/README.md).
        format!("--profiling={}", profiling()),
        format!("--cert-dir={}", s(&dir.join("apiserver-certs"))),
        // pods/exec reaches the simulated kubelets' streaming server (see kubelet/exec.rs)
        // at the node's InternalIP, over TLS verified both ways.
        "--kubelet-preferred-address-types=InternalIP".into(),
        format!("--kubelet-certificate-authority={}", s(&certs.ca_crt)),
        format!(
            "--kubelet-client-certificate={}",
            s(&certs.kubelet_client_crt)
        ),
        format!("--kubelet-client-key={}", s(&certs.kubelet_client_key)),
        // The simulated kubelet speaks the WebSocket remote-command protocol, not SPDY, so
        // the API server proxies a client's WebSocket as is instead of translating it to
        // SPDY (the default since 1.30; a real kubelet speaks both).
        "--feature-gates=TranslateStreamCloseWebsocketRequests=false".into(),
    ];
    if real_nodes {
        // An admission webhook (or APIService) behind a Service is called at one of its
        // endpoints, a pod IP, which the machine routes to that pod's node (real_node::attach),
        // not at its ClusterIP: no kube-proxy runs on the machine, and the machine would send
        // the Service range to its default gateway (every cluster here shares 100.64.0.0/16).
        args.push("--enable-aggregator-routing=true".into());
    }
    args
}

/// Flags the controller-manager and the scheduler share: delegated authentication and
/// authorization through the admin kubeconfig `kc`.
fn delegated(kc: &str) -> [String; 2] {
    [
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
    ]
}

/// kube-controller-manager with every controller, signing with the testenv CA.
fn controller_manager_args(dir: &Path, certs: &Certs, kc: &str) -> Result<Vec<String>> {
    let mut args = vec![
        format!("--kubeconfig={kc}"),
        // No HTTPS endpoint (nothing here reads its healthz or metrics): a port picked free
        // now can be taken by an outgoing connection before the process binds it, and a
        // controller-manager that cannot bind exits, leaving the cluster without its
        // controllers (no `default` ServiceAccount: "cluster not usable").
        "--secure-port=0".into(),
        format!("--service-account-private-key-file={}", s(&certs.sa_key)),
        format!("--root-ca-file={}", s(&certs.ca_crt)),
        "--use-service-account-credentials=true".into(),
        format!("--cluster-signing-cert-file={}", s(&certs.ca_crt)),
        format!("--cluster-signing-key-file={}", s(&certs.ca_key)),
        "--leader-elect=false".into(),
        "--controllers=*".into(),
        "--profiling=false".into(),
        format!("--cert-dir={}", s(&dir.join("kcm-certs"))),
    ];
    args.extend(delegated(kc));
    Ok(args)
}

/// kube-scheduler on loopback.
fn scheduler_args(dir: &Path, kc: &str) -> Result<Vec<String>> {
    let mut args = vec![
        format!("--kubeconfig={kc}"),
        // No HTTPS endpoint, as for the controller-manager above.
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
        "--profiling=false".into(),
        format!("--cert-dir={}", s(&dir.join("scheduler-certs"))),
    ];
    args.extend(delegated(kc));
    Ok(args)
}

/// Waits for the API server's `/readyz` (startup only: there is nothing to watch yet).
async fn wait_ready(kubeconfig: &Path, procs: &mut [Proc], timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let client = client_for(kubeconfig).await?;
    loop {
        for p in procs.iter_mut() {
            if !p.running() {
                let log = std::fs::read_to_string(p.log()).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(3).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                bail!("{} exited during startup: {}", p.name, tail.join(" | "));
            }
        }
        let req = http::Request::get("/readyz")
            .body(Vec::new())
            .context("building /readyz request")?;
        if let Ok(text) = client.request_text(req).await {
            if text.trim() == "ok" {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("kube-apiserver not ready after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_chosen_together_differ() {
        let ports: [u16; 3] = free_ports().unwrap();
        assert!(ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2]);
    }

    #[test]
    fn a_start_that_lost_a_port_is_told_from_another_failure_and_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::create_dir_all(dir.path().join("etcd/member")).unwrap();
        std::fs::write(logs.join("kube-apiserver.log"), "E1125 invalid flag\n").unwrap();
        assert!(!lost_a_port(&logs), "another failure is not retried");
        std::fs::write(
            logs.join("kube-apiserver.log"),
            "E1125 failed to listen on 127.0.0.1:40001: bind: address already in use\n",
        )
        .unwrap();
        assert!(lost_a_port(&logs));
        set_aside(dir.path(), &logs, 1).unwrap();
        assert!(
            !lost_a_port(&logs),
            "the next attempt starts with fresh logs"
        );
        assert!(logs.join("kube-apiserver.log.1").exists());
        assert!(!dir.path().join("etcd").exists(), "and fresh etcd data");
    }
}
