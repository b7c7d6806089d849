//! Running one pod as a local process the way a container would see it: in a private mount
//! namespace where the pod's volumes, its ServiceAccount token and its termination-message file
//! are bind-mounted at the paths the pod spec names; host commands through recording shims.
//! Init containers run first, one after another, each to completion, in the same volumes (an
//! emptyDir one writes is what the next one reads), as a kubelet runs them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolume, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::json;

use super::pod_status::{report_failed, report_running, report_terminated};
use super::started::{set_pid, still_wanted, StartedHandle};
use super::{path_str, sh_quote, KubeletConfig};

/// Runs the pod's init containers, then its first container as a process until it ends,
/// reporting status as a kubelet.
pub(super) async fn run(
    client: &Client,
    cfg: &KubeletConfig,
    node: &str,
    pod: &Pod,
    program: &Path,
    started: &StartedHandle,
) -> Result<()> {
    let spec = pod.spec.clone().unwrap_or_default();
    let container = spec.containers.first().cloned().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let dir = cfg.pod_dir(node, &ns, &name);
    std::fs::create_dir_all(dir.join("volumes"))?;
    let sa_dir = dir.join("serviceaccount");
    let kubeconfig = project_token(client, cfg, &spec, (&ns, &name, &uid), &dir).await?;
    let automount = spec.volumes.iter().flatten().any(|v| {
        v.projected.as_ref().is_some_and(|p| {
            p.sources
                .iter()
                .flatten()
                .any(|s| s.service_account_token.is_some())
        })
    });
    let pod_view = PodView {
        client,
        cfg,
        node,
        pod,
        dir: &dir,
        sa_dir: &sa_dir,
        kubeconfig: automount.then_some(kubeconfig.as_path()),
    };
    if let Some(message) = run_init_containers(&pod_view, &spec).await? {
        report_failed(client, pod, &message).await?;
        return Ok(());
    }
    let (mut cmd, termination) = pod_view.command(&container, program, "log").await?;
    let started_at = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut child = cmd.spawn().context("starting the pod's process")?;
    set_pid(started, &uid, child.id());
    report_running(client, pod, true).await?;
    let status = child.wait().await?;
    if !still_wanted(started, &uid) {
        return Ok(());
    }
    let code = status.code().unwrap_or(137);
    let mut message = std::fs::read_to_string(&termination).unwrap_or_default();
    if message.trim().is_empty()
        && code != 0
        && container.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
    {
        message = tail(&dir.join("log"), 2048, 80);
    }
    message.truncate(4096);
    report_terminated(client, pod, code, &message, &started_at).await?;
    Ok(())
}

/// The pod's ServiceAccount token, bound to this pod (`ns`, `name`, `uid`), written under
/// `dir/serviceaccount` exactly as the kubelet would project it; returns the path of a
/// kubeconfig that uses it.
async fn project_token(
    client: &Client,
    cfg: &KubeletConfig,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    (ns, name, uid): (&str, &str, &str),
    dir: &Path,
) -> Result<std::path::PathBuf> {
    let sa = spec
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".into());
    let sa_dir = dir.join("serviceaccount");
    std::fs::create_dir_all(&sa_dir)?;
    let token = request_token(client, ns, &sa, name, uid).await?;
    std::fs::write(sa_dir.join("token"), &token)?;
    std::fs::copy(&cfg.ca_crt, sa_dir.join("ca.crt"))?;
    std::fs::write(sa_dir.join("namespace"), ns)?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:{}', certificate-authority: '{}'}}\nusers:\n- name: u\n  user: {{tokenFile: '{}'}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u, namespace: '{ns}'}}\ncurrent-context: c\n",
            cfg.api_port,
            path_str(&sa_dir.join("ca.crt")),
            path_str(&sa_dir.join("token"))
        ),
    )?;
    Ok(kubeconfig)
}

/// Runs the pod's init containers in order; returns why the pod failed if one did.
async fn run_init_containers(
    pod_view: &PodView<'_>,
    spec: &k8s_openapi::api::core::v1::PodSpec,
) -> Result<Option<String>> {
    for init in spec.init_containers.iter().flatten() {
        let image = init.image.clone().unwrap_or_default();
        let Some(init_program) = pod_view.cfg.images.program(&image).cloned() else {
            anyhow::bail!(
                "init container {}: image {image} is not mapped to a program",
                init.name
            );
        };
        let (mut cmd, _) = pod_view
            .command(init, &init_program, &format!("init-{}", init.name))
            .await?;
        let status = cmd
            .spawn()
            .context("starting an init container")?
            .wait()
            .await?;
        if !status.success() {
            let log = tail(
                &pod_view.dir.join(format!("init-{}.log", init.name)),
                1024,
                20,
            );
            return Ok(Some(format!(
                "init container {} exited with {}: {log}",
                init.name,
                status.code().unwrap_or(137)
            )));
        }
    }
    Ok(None)
}

async fn request_token(
    client: &Client,
    ns: &str,
    sa: &str,
    pod: &str,
    uid: &str,
) -> Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let req: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}},
    }))?;
    let what = format!("TokenRequest for serviceaccount {ns}/{sa}");
    let pp = PostParams::default();
    let resp: TokenRequest =
        super::with_retries(&what, || api.create_subresource("token", sa, &pp, &req))
            .await
            .context(what.clone())?;
    Ok(resp.status.map(|s| s.token).unwrap_or_default())
}

/// What every container of one pod shares: the pod, its directory, its ServiceAccount token.
struct PodView<'a> {
    client: &'a Client,
    cfg: &'a KubeletConfig,
    node: &'a str,
    pod: &'a Pod,
    dir: &'a Path,
    sa_dir: &'a Path,
    /// The kubeconfig to point `KUBECONFIG` at, when the token is mounted.
    kubeconfig: Option<&'a Path>,
}

impl PodView<'_> {
    /// The process of one container, ready to spawn, writing its output to `log` in the pod's
    /// directory; and the file its termination message is written to.
    async fn command(
        &self,
        container: &Container,
        program: &Path,
        log: &str,
    ) -> Result<(tokio::process::Command, PathBuf)> {
        let (client, cfg, node, pod, dir) = (self.client, self.cfg, self.node, self.pod, self.dir);
        let name = pod.metadata.name.clone().unwrap_or_default();
        let image = container.image.as_deref().unwrap_or_default();
        let tools = cfg.images.tools(image);
        let commands = cfg.image_commands_dir(image)?;
        let mut env = base_env(cfg, node, &name, tools, &commands);
        if let Some(kubeconfig) = self.kubeconfig {
            env.insert("KUBECONFIG".into(), path_str(kubeconfig));
        }
        for (k, v) in resolve_env(client, pod, container, &env).await? {
            env.insert(k, v);
        }

        // The first container's files keep their plain names: pods/exec and logs read them.
        let own = |file: &str| match log {
            "log" => dir.join(file),
            _ => dir.join(format!("{log}.{file}")),
        };
        let termination = own("termination-log");
        std::fs::write(&termination, "")?;
        let mounts = self.mounts(container, &termination).await?;
        let launcher = own("launcher.sh");
        std::fs::write(&launcher, launcher_script(container, &mounts))?;
        if log == "log" {
            // What `pods/exec` needs to run a command in this pod's view (see `super::exec`).
            std::fs::write(dir.join("env.json"), serde_json::to_vec(&env)?)?;
        }

        let mount_targets: Vec<&str> = mounts.iter().map(|(_, t)| t.as_str()).collect();
        let argv = argv(container, program, &env, &mount_targets);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(own("log"))?;
        let mut cmd = tokio::process::Command::new(super::tools::host_binary("unshare")?);
        cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh"])
            .arg(&launcher)
            .args(&argv);
        cmd.env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        crate::procs::own_group_and_die_with_parent(&mut cmd);
        Ok((cmd, termination))
    }

    /// What `container` sees mounted (source on the host, target in the pod): its termination
    /// message file, then its volume mounts.
    async fn mounts(
        &self,
        container: &Container,
        termination: &Path,
    ) -> Result<Vec<(PathBuf, String)>> {
        let (client, cfg, node, pod, dir) = (self.client, self.cfg, self.node, self.pod, self.dir);
        let spec = pod.spec.clone().unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let mut mounts: Vec<(PathBuf, String)> = vec![(
            termination.to_path_buf(),
            container
                .termination_message_path
                .clone()
                .unwrap_or_else(|| "/dev/termination-log".into()),
        )];
        for vm in container.volume_mounts.iter().flatten() {
            let Some(vol) = spec.volumes.iter().flatten().find(|v| v.name == vm.name) else {
                continue;
            };
            let mut src = volume_source(client, cfg, node, &ns, dir, vol, self.sa_dir).await?;
            if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
                src = src.join(sub);
            }
            mounts.push((src, vm.mount_path.clone()));
        }
        Ok(mounts)
    }
}

/// The script a container starts with: the pod's view of the filesystem (`mounts`, bound with
/// the host's tools), then the container's command in its working directory, with the pod's
/// PATH (its image's commands only).
fn launcher_script(container: &Container, mounts: &[(PathBuf, String)]) -> String {
    let mut script = String::from("#!/bin/sh\n# testenv: the pod's view of the filesystem, then exec the container's command.\nset -e\nPOD_PATH=\"$PATH\"\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\nmount --make-rprivate / 2>/dev/null || true\n");
    for (src, target) in mounts {
        if shadows_plumbing(target) {
            // A volume over /tmp (the executor's scratch emptyDir) would hide this
            // kubelet's own files (pod directories, kubeconfig, command links) that live
            // under the machine's temporary directory: the pod writes the machine's /tmp.
            continue;
        }
        let (s, t) = (sh_quote(&path_str(src)), sh_quote(target));
        if src.is_dir() {
            script.push_str(&format!("mkdir -p {t}\n"));
        } else {
            script.push_str(&format!(
                "mkdir -p \"$(dirname {t})\"; [ -e {t} ] || : > {t}\n"
            ));
        }
        script.push_str(&format!("mount --bind {s} {t}\n"));
    }
    let workdir = container.working_dir.clone().unwrap_or_else(|| "/".into());
    script.push_str(&format!(
        "cd {}\nPATH=\"$POD_PATH\"\nexec \"$@\"\n",
        sh_quote(&workdir)
    ));
    script
}

/// The environment every container starts with: `PATH` leads with the node's recording shims,
/// then the image's own tools (if it was mapped with some), then the commands the image
/// provides (see [`super::tools`]) — and nothing else of the host's: a pod finds only what its
/// image would have.
fn base_env(
    cfg: &KubeletConfig,
    node: &str,
    pod: &str,
    tools: Option<&PathBuf>,
    commands: &Path,
) -> BTreeMap<String, String> {
    let mut path = vec![path_str(&cfg.nodes_dir.join(node).join("shims"))];
    path.extend(tools.map(|t| path_str(t)));
    path.push(path_str(commands));
    [
        ("PATH".to_string(), path.join(":")),
        ("HOSTNAME".into(), pod.to_string()),
        ("HOME".into(), "/root".into()),
        ("KUBERNETES_SERVICE_HOST".into(), "127.0.0.1".into()),
        ("KUBERNETES_SERVICE_PORT".into(), cfg.api_port.to_string()),
    ]
    .into()
}

/// The container's `env`, with `valueFrom` resolved (downward API, ConfigMap and Secret keys)
/// and `$(VAR)` references expanded like the kubelet does.
async fn resolve_env(
    client: &Client,
    pod: &Pod,
    c: &Container,
    base: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut known = base.clone();
    let mut out = Vec::new();
    for e in c.env.iter().flatten() {
        let value = if let Some(v) = &e.value {
            expand(v, &known)
        } else if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                field(pod, &f.field_path)
            } else if let Some(k) = &from.config_map_key_ref {
                let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
                    .get(&k.name)
                    .await?;
                cm.data
                    .and_then(|d| d.get(&k.key).cloned())
                    .unwrap_or_default()
            } else if let Some(k) = &from.secret_key_ref {
                let s = Api::<Secret>::namespaced(client.clone(), &ns)
                    .get(&k.name)
                    .await?;
                s.data
                    .and_then(|d| {
                        d.get(&k.key)
                            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                    })
                    .unwrap_or_default()
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        known.insert(e.name.clone(), value.clone());
        out.push((e.name.clone(), value));
    }
    Ok(out)
}

fn field(pod: &Pod, path: &str) -> String {
    let m = &pod.metadata;
    let map_key = |p: &str, prefix: &str| {
        p.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" | "status.podIP" => "127.0.0.1".into(),
        p => {
            if let Some(k) = map_key(p, "metadata.labels['") {
                m.labels
                    .as_ref()
                    .and_then(|l| l.get(&k).cloned())
                    .unwrap_or_default()
            } else if let Some(k) = map_key(p, "metadata.annotations['") {
                m.annotations
                    .as_ref()
                    .and_then(|l| l.get(&k).cloned())
                    .unwrap_or_default()
            } else {
                String::new()
            }
        }
    }
}

/// `$(VAR)` → value; `$$(VAR)` → literal `$(VAR)`; unknown references stay as written.
fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("$(") {
        if i > 0 && rest[..i].ends_with('$') {
            out.push_str(&rest[..i - 1]);
            out.push_str("$(");
            rest = &rest[i + 2..];
            continue;
        }
        out.push_str(&rest[..i]);
        match rest[i + 2..].find(')') {
            Some(j) => {
                let name = &rest[i + 2..i + 2 + j];
                match env.get(name) {
                    Some(v) => out.push_str(v),
                    None => out.push_str(&rest[i..i + 3 + j]),
                }
                rest = &rest[i + 3 + j..];
            }
            None => {
                out.push_str(&rest[i..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The container's command line: its `command` where that names a file the container sees (on
/// this machine, or under one of its volume mounts, e.g. a binary an init container copied into
/// an emptyDir), else the image's program, then `args`.
fn argv(
    c: &Container,
    program: &Path,
    env: &BTreeMap<String, String>,
    mount_targets: &[&str],
) -> Vec<String> {
    let command: Vec<String> = c.command.iter().flatten().map(|s| expand(s, env)).collect();
    let args: Vec<String> = c.args.iter().flatten().map(|s| expand(s, env)).collect();
    let mounted = |p: &str| {
        mount_targets
            .iter()
            .any(|t| Path::new(p).starts_with(t) && Path::new(p) != Path::new(t))
    };
    let mut argv = match command.split_first() {
        Some((first, rest)) => {
            let first = if Path::new(first).is_absolute()
                && (Path::new(first).exists() || mounted(first))
            {
                first.clone()
            } else {
                path_str(program)
            };
            std::iter::once(first).chain(rest.iter().cloned()).collect()
        }
        None => vec![path_str(program)],
    };
    argv.extend(args);
    argv
}

/// Where a volume's content comes from on this machine.
async fn volume_source(
    client: &Client,
    cfg: &KubeletConfig,
    node: &str,
    ns: &str,
    dir: &Path,
    vol: &k8s_openapi::api::core::v1::Volume,
    sa_dir: &Path,
) -> Result<PathBuf> {
    let target = dir.join("volumes").join(&vol.name);
    if let Some(hp) = &vol.host_path {
        let p = cfg.node_root(node).join(hp.path.trim_start_matches('/'));
        match hp.type_.as_deref() {
            Some("FileOrCreate") | Some("File") => {
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                if !p.exists() {
                    std::fs::write(&p, "")?;
                }
            }
            _ => std::fs::create_dir_all(&p)?,
        }
        return Ok(p);
    }
    if let Some(claim) = &vol.persistent_volume_claim {
        return claimed_path(client, cfg, node, ns, &claim.claim_name).await;
    }
    std::fs::create_dir_all(&target)?;
    if let Some(cm) = &vol.config_map {
        let data = match Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get(&cm.name)
            .await
        {
            Ok(c) => c.data.unwrap_or_default(),
            Err(_) if cm.optional == Some(true) => Default::default(),
            Err(e) => return Err(e).with_context(|| format!("configMap volume {}", cm.name)),
        };
        write_keys(
            &target,
            data.into_iter().map(|(k, v)| (k, v.into_bytes())),
            cm.items.as_deref(),
        )?;
    } else if let Some(sec) = &vol.secret {
        let name = sec.secret_name.clone().unwrap_or_default();
        let data = Api::<Secret>::namespaced(client.clone(), ns)
            .get(&name)
            .await?
            .data
            .unwrap_or_default();
        write_keys(
            &target,
            data.into_iter().map(|(k, v)| (k, v.0)),
            sec.items.as_deref(),
        )?;
    } else if vol.projected.is_some() {
        return Ok(sa_dir.to_path_buf());
    }
    Ok(target)
}

/// A bound claim's storage: its PersistentVolume's `hostPath` or `local` path on the node.
async fn claimed_path(
    client: &Client,
    cfg: &KubeletConfig,
    node: &str,
    ns: &str,
    claim: &str,
) -> Result<PathBuf> {
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get(claim)
        .await
        .with_context(|| format!("persistentVolumeClaim {claim}"))?;
    let volume = pvc
        .spec
        .and_then(|s| s.volume_name)
        .filter(|v| !v.is_empty())
        .with_context(|| format!("persistentVolumeClaim {claim} is not bound"))?;
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&volume)
        .await
        .with_context(|| format!("persistentVolume {volume}"))?
        .spec
        .unwrap_or_default();
    let path = pv
        .host_path
        .map(|h| h.path)
        .or(pv.local.map(|l| l.path))
        .with_context(|| {
            format!("persistentVolume {volume}: testenv mounts only hostPath and local volumes")
        })?;
    let p = cfg.node_root(node).join(path.trim_start_matches('/'));
    std::fs::create_dir_all(&p)?;
    Ok(p)
}

fn write_keys(
    dir: &Path,
    data: impl Iterator<Item = (String, Vec<u8>)>,
    items: Option<&[k8s_openapi::api::core::v1::KeyToPath]>,
) -> Result<()> {
    let data: BTreeMap<String, Vec<u8>> = data.collect();
    match items {
        Some(items) => {
            for it in items {
                if let Some(v) = data.get(&it.key) {
                    let p = dir.join(&it.path);
                    if let Some(parent) = p.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(p, v)?;
                }
            }
        }
        None => {
            for (k, v) in &data {
                std::fs::write(dir.join(k), v)?;
            }
        }
    }
    Ok(())
}

fn tail(path: &Path, max_bytes: usize, max_lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(max_lines);
    let joined = lines[start..].join("\n");
    let cut = joined.len().saturating_sub(max_bytes);
    joined[joined
        .char_indices()
        .map(|(i, _)| i)
        .find(|i| *i >= cut)
        .unwrap_or(0)..]
        .to_string()
}

/// Whether mounting over `target` would hide the simulated kubelet's own files, which live under
/// the temporary directory (the cluster directory) and the cache (binaries).
fn shadows_plumbing(target: &str) -> bool {
    let target = Path::new(target);
    let tmp = std::env::temp_dir();
    target == Path::new("/") || tmp.starts_with(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_references_expand_like_the_kubelet() {
        let env: BTreeMap<String, String> = [("A".to_string(), "1".to_string())].into();
        assert_eq!(expand("x$(A)y", &env), "x1y");
        assert_eq!(expand("$$(A)", &env), "$(A)");
        assert_eq!(expand("$(B)", &env), "$(B)");
    }
}
