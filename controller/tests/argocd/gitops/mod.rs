//! What the Argo CD e2e (`argocd.rs`) works with: one real Argo CD for the test binary (started
//! beside the shared cluster, on a thread of its own), a local git repository per test that
//! Argo CD syncs from over `file://`, and Applications read as Argo CD reports them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::pinned_kind;
use kube::Client;
use pseudoflow_testenv::argocd::{self, ArgoCd};
use serde_json::{json, Value};

use super::common;

mod actions;
mod approver;
mod rollout;

pub use approver::{approver_project, wait_webhooks_active, APPROVER};

/// `argocd-cm`'s data: the chart's health check and resource actions, exactly the snippet
/// `charts/argocd-cm.py` prints for docs/gitops.md, and impersonation enabled but not enforced
/// (a project with `destinationServiceAccounts` syncs and runs actions as that account, every
/// other as Argo CD's own; docs/gitops.md, "One-click approvals, knowingly").
fn cm_data() -> BTreeMap<String, String> {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let mut data = argocd::chart_cm_data(repo).expect("argocd-cm data from the chart");
    data.insert(
        "application.sync.impersonation.enabled".into(),
        "true".into(),
    );
    data.insert(
        "application.sync.impersonation.enforced".into(),
        "false".into(),
    );
    data
}

/// The Argo CD of this test binary; panics naming `make argocd` when it is not built.
pub fn argocd() -> &'static ArgoCd {
    static ARGO: OnceLock<Result<ArgoCd, String>> = OnceLock::new();
    ARGO.get_or_init(|| {
        let env = common::env();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("argocd".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                let started = rt.block_on(async {
                    let client = env.client().await?;
                    common::install_crd(&client).await;
                    ArgoCd::start(env, &cm_data()).await
                });
                let _ = tx.send(started.map_err(|e| format!("{e:#}")));
                // Argo CD's processes die with this thread: keep it for the whole binary.
                rt.block_on(std::future::pending::<()>());
            })
            .expect("argocd thread");
        rx.recv()
            .unwrap_or_else(|_| Err("argocd thread died".into()))
    })
    .as_ref()
    .unwrap_or_else(|e| panic!("Argo CD: {e}"))
}

/// A git repository on the cluster's disk that an Application syncs over `file://`.
pub struct Repo {
    dir: PathBuf,
}

impl Repo {
    /// An empty repository (branch `main`) named after the test's namespace.
    pub fn new(name: &str) -> Repo {
        let dir = common::env().dir().join("git").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let repo = Repo { dir };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    fn git(&self, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=test", "-c", "user.email=test@example.com"])
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Writes `files` (name, object), removes `gone`, commits everything; returns when.
    pub fn commit(&self, files: &[(&str, Value)], gone: &[&str], message: &str) -> Instant {
        for (name, object) in files {
            let text = serde_yaml::to_string(object).unwrap();
            std::fs::write(self.dir.join(name), text).unwrap();
        }
        for name in gone {
            std::fs::remove_file(self.dir.join(name)).unwrap();
        }
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        Instant::now()
    }

    /// Its `file://` URL.
    pub fn url(&self) -> String {
        format!("file://{}", self.dir.display())
    }
}

/// A PseudoFlow manifest for git: `name` in `ns` with `spec` and `annotations`.
pub fn flow(ns: &str, name: &str, annotations: Value, spec: Value) -> Value {
    json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
           "metadata": {"name": name, "namespace": ns, "annotations": annotations}, "spec": spec})
}

async fn applications(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application");
    let (ar, _) = pinned_kind(client, &gvk).await.unwrap();
    Api::namespaced_with(client.clone(), argocd::NAMESPACE, &ar)
}

/// Creates Application `name` syncing `repo` into `ns`, automated with prune and self-heal.
pub async fn create_app(client: &Client, name: &str, repo: &Repo, ns: &str) {
    create_app_in(client, "default", name, repo, ns).await
}

/// [`create_app`] in AppProject `project`.
pub async fn create_app_in(client: &Client, project: &str, name: &str, repo: &Repo, ns: &str) {
    argocd();
    let app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": argocd::NAMESPACE},
        "spec": {"project": project,
                 "source": {"repoURL": repo.url(), "path": ".", "targetRevision": "main"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": ns},
                 "syncPolicy": {"automated": {"prune": true, "selfHeal": true}}}});
    pseudoflow_testenv::apply::apply_value(client, app, None)
        .await
        .unwrap();
}

/// Asks Argo CD to look at git now (what a git webhook does), instead of at its next poll.
pub async fn refresh(client: &Client, name: &str) {
    let patch = json!({"metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}});
    applications(client)
        .await
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// The Application's status.
pub async fn app_status(client: &Client, name: &str) -> Value {
    let app = applications(client).await.get(name).await.unwrap();
    app.data["status"].clone()
}

/// The entry of `status.resources` for `kind`/`name`, if Argo CD lists it.
pub fn resource<'a>(status: &'a Value, kind: &str, name: &str) -> Option<&'a Value> {
    status["resources"]
        .as_array()?
        .iter()
        .find(|r| r["kind"] == kind && r["name"] == name)
}

/// Polls the Application every 250 ms until `pred` holds on its status (returned), calling
/// `seen` with each status; panics with the last one after `secs`.
pub async fn wait_app(
    client: &Client,
    name: &str,
    secs: u64,
    what: &str,
    mut seen: impl FnMut(&Value),
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let status = app_status(client, name).await;
        seen(&status);
        if pred(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "Application {name}: waited {secs}s for {what}; last status: {status:#}\nArgo CD logs in {}",
            argocd().dir().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The health Argo CD reports for flow `name` (`Progressing`, `Healthy`, ...), or "".
pub fn flow_health(status: &Value, name: &str) -> String {
    resource(status, "PseudoFlow", name)
        .and_then(|r| r["health"]["status"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The Application's status after Argo CD compared it with git once more (refreshed now).
pub async fn compared_again(client: &Client, ns: &str) -> Value {
    let before = app_status(client, ns).await["reconciledAt"].clone();
    // `reconciledAt` has whole seconds: a comparison ending in the second of the one before
    // would look like no comparison at all (nothing else makes an idle Application compare
    // again within the wait). Asking in a later second makes any new one tell.
    let last = before
        .as_str()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
    if let Some(last) = last {
        while k8s_openapi::jiff::Timestamp::now().as_second() <= last.as_second() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    refresh(client, ns).await;
    wait_app(
        client,
        ns,
        60,
        "a new comparison",
        |_| {},
        |s| s["reconciledAt"] != before,
    )
    .await
}

/// Runs Argo CD resource action `action` on flow `flow` in `ns` of Application `app` through
/// argocd-server (`argocd app actions run`); whether it succeeded, and its output.
pub async fn run_action(app: &str, action: &str, flow: &str, ns: &str) -> (bool, String) {
    let args = [
        "app",
        "actions",
        "run",
        app,
        action,
        "--kind",
        "PseudoFlow",
        "--resource-name",
        flow,
        "--namespace",
        ns,
    ];
    let out = argocd().cli(&args).await.unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
