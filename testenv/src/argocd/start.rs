//! Starting Argo CD's processes in order, each waited for on its port: redis-server, the
//! repo-server, the application controller and argocd-server, with the recipe that works
//! outside a cluster (`ARGOCD_FAKE_IN_CLUSTER`, per-run data paths and ask-pass socket, the
//! repo-server's git wrappers on `PATH`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{objects, ArgoCd};
use crate::procs::Proc;
use crate::TestEnv;

/// Ports of one Argo CD.
struct Ports {
    redis: u16,
    repo: u16,
    server: u16,
    metrics: [u16; 3],
}

impl ArgoCd {
    /// Starts Argo CD beside `env` with `cm_data` as `argocd-cm`'s data; its state and logs go to
    /// `<cluster dir>/argocd`. Start it from a thread that lives as long as it should (its
    /// processes die with the thread that started them, see [`crate::procs`]). Fails, naming
    /// `make argocd`, when the binary is missing.
    pub async fn start(env: &TestEnv, cm_data: &BTreeMap<String, String>) -> Result<ArgoCd> {
        let bin = super::binary()?;
        let redis = which("redis-server").context(
            "redis-server not found on PATH: run `make argocd` (it installs redis-server from Debian)",
        )?;
        let dir = env.dir().join("argocd");
        for d in ["tls", "ssh", "gpg/keys", "gpg/source", "cmp", "cli", "tmp"] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        let client = env.client().await?;
        objects::apply_crds(&client, &super::crds_dir()).await?;
        retry_for(Duration::from_secs(30), || {
            objects::apply_config(&client, cm_data)
        })
        .await?;
        let kubeconfig = dir.join("argocd.kubeconfig");
        objects::identity(&client, env.kubeconfig_path(), &kubeconfig).await?;
        let [redis_port, repo, server, m1, m2, m3] = crate::controlplane::free_ports()?;
        let ports = Ports {
            redis: redis_port,
            repo,
            server,
            metrics: [m1, m2, m3],
        };
        let mut argo = ArgoCd {
            dir: dir.clone(),
            procs: vec![],
            server_port: ports.server,
        };
        let redis_args = vec![
            "--port".into(),
            ports.redis.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--dir".into(),
            dir.join("tmp").display().to_string(),
        ];
        argo.launch("redis-server", &redis, &redis_args, &[], ports.redis)
            .await?;
        let base = base_env(&dir, &kubeconfig);
        for (role, args, port) in roles(&ports) {
            let mut env = base.clone();
            env.push(("ARGOCD_BINARY_NAME".into(), role.into()));
            argo.launch(role, &bin, &args, &env, port).await?;
        }
        Ok(argo)
    }

    /// Starts one process (output in `<dir>/<name>.log`) and waits until it listens on `port`.
    async fn launch(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        port: u16,
    ) -> Result<()> {
        let log = self.dir.join(format!("{name}.log"));
        let mut p = Proc::spawn_with_env(name, program, args, env, &log)?;
        let deadline = Instant::now() + Duration::from_secs(90);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if !p.running() {
                bail!(
                    "{name} exited during startup; its log: {}\n{}",
                    log.display(),
                    tail(&log)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{name} not listening on {port} after 90 s; its log: {}",
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.procs.push(p);
        Ok(())
    }
}

/// The environment every Argo CD process gets: the cluster through `kubeconfig` as if in it,
/// data paths and the ask-pass socket of this run only, the git wrappers on `PATH`.
fn base_env(dir: &Path, kubeconfig: &Path) -> Vec<(String, String)> {
    let s = |p: PathBuf| p.display().to_string();
    let path = format!(
        "{}:{}",
        super::bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    vec![
        ("KUBECONFIG".into(), s(kubeconfig.to_path_buf())),
        ("ARGOCD_FAKE_IN_CLUSTER".into(), "true".into()),
        ("ARGOCD_TLS_DATA_PATH".into(), s(dir.join("tls"))),
        ("ARGOCD_SSH_DATA_PATH".into(), s(dir.join("ssh"))),
        ("ARGOCD_GNUPGHOME".into(), s(dir.join("gpg/keys"))),
        ("ARGOCD_GPG_DATA_PATH".into(), s(dir.join("gpg/source"))),
        ("ARGOCD_GPG_ENABLED".into(), "false".into()),
        ("ARGOCD_PLUGINSOCKFILEPATH".into(), s(dir.join("cmp"))),
        ("ARGOCD_ASK_PASS_SOCK".into(), s(dir.join("ask-pass.sock"))),
        ("TMPDIR".into(), s(dir.join("tmp"))),
        ("HOME".into(), s(dir.to_path_buf())),
        ("PATH".into(), path),
    ]
}

/// The three Argo CD roles in start order, their arguments and the port each listens on.
fn roles(p: &Ports) -> Vec<(&'static str, Vec<String>, u16)> {
    let redis = format!("127.0.0.1:{}", p.redis);
    let repo = format!("127.0.0.1:{}", p.repo);
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (m1, m2, m3) = (
        p.metrics[0].to_string(),
        p.metrics[1].to_string(),
        p.metrics[2].to_string(),
    );
    let repo_port = p.repo.to_string();
    let server_port = p.server.to_string();
    vec![
        (
            "argocd-repo-server",
            args(&[
                "--port",
                &repo_port,
                "--metrics-port",
                &m1,
                "--redis",
                &redis,
                "--disable-tls",
                "--client-ca-path=",
                "--address",
                "127.0.0.1",
            ]),
            p.repo,
        ),
        (
            "argocd-application-controller",
            args(&[
                "--redis",
                &redis,
                "--repo-server",
                &repo,
                "--repo-server-plaintext",
                "--app-resync",
                "20",
                "--metrics-port",
                &m2,
                // Each resource's health in status.resources (off by default since v3), so
                // tests read it from the Application.
                "--persist-resource-health",
            ]),
            p.metrics[1],
        ),
        (
            "argocd-server",
            args(&[
                "--insecure",
                "--disable-auth",
                "--port",
                &server_port,
                "--address",
                "127.0.0.1",
                "--metrics-port",
                &m3,
                "--redis",
                &redis,
                "--repo-server",
                &repo,
                "--repo-server-plaintext",
                "--dex-server",
                "",
                "--staticassets",
                "/nonexistent",
            ]),
            p.server,
        ),
    ]
}

/// Retries `f` until it succeeds or `within` has passed (CRDs take a moment to be served).
async fn retry_for<F, Fut>(within: Duration, mut f: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let deadline = Instant::now() + within;
    loop {
        match f().await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
