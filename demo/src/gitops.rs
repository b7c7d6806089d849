//! `make demo ARGOCD=1`: the seed flows synced by a real Argo CD (testenv's, v3.6.1, built by
//! `make argocd`) from a local git repository over `file://`, instead of applied by the demo.
//! The repository holds the seed flow files as written; the Application `seed-flows` syncs it
//! with automated sync, prune and self-heal, and `argocd-cm` carries the chart's health check and
//! resource actions. A commit to the repository is a change Argo CD applies and the controller
//! runs: the closing text says how.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _, Result};
use kube::api::{Api, DynamicObject};
use pseudoflow_controller::flow::flow_resource;
use pseudoflow_testenv::argocd::{self, ArgoCd};
use pseudoflow_testenv::{apply::apply_value, seed, TestEnv};
use serde_json::json;

/// The Application syncing the seed flows, in namespace `argocd`.
pub const APP: &str = "seed-flows";

/// A running Argo CD syncing the seed flows from [`GitOps::repo`].
pub struct GitOps {
    /// Argo CD's processes; dropping it stops them.
    pub argocd: ArgoCd,
    /// The git repository (branch `main`) the Application syncs.
    pub repo: PathBuf,
}

/// Fails, naming `make argocd`, when Argo CD is not built: said before a cluster is started.
pub fn check_built() -> Result<()> {
    argocd::binary().map(|_| ())
}

/// Commits the seed flows of `root` to a repository in the cluster's directory, starts Argo CD
/// beside `env` and has it sync them; returns once Argo CD created every flow, with their
/// (namespace, name).
pub async fn start(
    env: &TestEnv,
    client: &kube::Client,
    root: &Path,
) -> Result<(GitOps, Vec<(String, String)>)> {
    let repo = env.dir().join("git").join(APP);
    let names = commit_seed_flows(root, &repo)?;
    println!(
        "starting Argo CD {} (redis-server, repo-server, application controller, server)...",
        argocd::ARGOCD_VERSION
    );
    let argocd = ArgoCd::start(env, &argocd::chart_cm_data(root)?).await?;
    let app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": APP, "namespace": argocd::NAMESPACE},
        "spec": {"project": "default",
                 "source": {"repoURL": format!("file://{}", repo.display()), "path": ".", "targetRevision": "main"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"},
                 "syncPolicy": {"automated": {"prune": true, "selfHeal": true}}}});
    apply_value(client, app, None)
        .await
        .context("creating the Argo CD Application")?;
    wait_created(client, &names).await?;
    Ok((GitOps { argocd, repo }, names))
}

/// `git init` at `repo` and one commit of the seed flow files (their names, as written);
/// returns the flows' (namespace, name).
fn commit_seed_flows(root: &Path, repo: &Path) -> Result<Vec<(String, String)>> {
    std::fs::create_dir_all(repo).with_context(|| format!("creating {}", repo.display()))?;
    git(repo, &["init", "-q", "-b", "main"])?;
    let mut names = Vec::new();
    for f in seed::SEED_FLOWS {
        let text = std::fs::read_to_string(root.join(f)).with_context(|| format!("reading {f}"))?;
        let v: serde_json::Value =
            serde_yaml::from_str(&text).with_context(|| format!("parsing {f}"))?;
        let meta = &v["metadata"];
        let name = meta["name"]
            .as_str()
            .with_context(|| format!("{f}: metadata.name"))?;
        let ns = meta["namespace"].as_str().unwrap_or("default");
        names.push((ns.to_string(), name.to_string()));
        let file = Path::new(f).file_name().context("a seed flow path")?;
        std::fs::write(repo.join(file), text)?;
    }
    git(repo, &["add", "-A"])?;
    git(repo, &["commit", "-q", "-m", "the seed flows"])?;
    Ok(names)
}

/// Runs `git args` in `repo` (as "demo" when it commits).
pub fn git(repo: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("git")
        .args(["-c", "user.name=demo", "-c", "user.email=demo@example.com"])
        .args(args)
        .current_dir(repo)
        .output()
        .context("running git (is it installed?)")?;
    ensure!(
        out.status.success(),
        "git {} in {}: {}",
        args.join(" "),
        repo.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Waits up to two minutes until every flow in `names` exists (Argo CD's first sync).
async fn wait_created(client: &kube::Client, names: &[(String, String)]) -> Result<()> {
    let t0 = Instant::now();
    for (ns, name) in names {
        let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &flow_resource());
        while flows.get_opt(name).await?.is_none() {
            ensure!(
                t0.elapsed() < Duration::from_secs(120),
                "Argo CD did not create flow {ns}/{name} in 120 s (kubectl get applications -n argocd {APP} -o yaml)"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    println!(
        "Argo CD synced the {} seed flows from git in {:.1}s",
        names.len(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What to try with Argo CD: commit a change to the repository and watch it run.
pub fn closing_text(repo: &Path) -> String {
    let repo = repo.display();
    format!(
        r#"
Argo CD {version} syncs the seed flows from the git repository {repo} (Application {APP} in
namespace argocd: automated sync, prune, self-heal; the chart's health check and resource
actions in argocd-cm). Commit a change and watch it run (labels-from-map: node1 env stage -> dev):
  sed -i 's/"env":"stage"/"env":"dev"/' {repo}/labels-from-map.yaml
  git -C {repo} commit -qam "node1 to dev"
  kubectl annotate application -n argocd {APP} argocd.argoproj.io/refresh=normal   # what a git webhook does; else Argo CD sees the commit at its next poll
  kubectl get pf -A -w
  kubectl get applications -n argocd
  kubectl get applications -n argocd {APP} -o jsonpath='{{range .status.resources[*]}}{{.kind}} {{.name}} {{.status}} {{.health.status}}{{"\n"}}{{end}}'"#,
        version = argocd::ARGOCD_VERSION,
    )
}
