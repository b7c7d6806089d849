//! After the seed flows: what the README leads with, running on the demo cluster for the user to
//! try. A flow bound to a kind (seed 001's `Database` operator, `examples/kopf/`) serving one
//! `Database`, and a flow waiting at an approval step (`examples/steps/approval.yaml`) for
//! `kubectl pf approve`; then the commands to look at them, printed with the KUBECONFIG.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::wait::{await_condition, conditions};
use pseudoflow_controller::flow::flow_resource;
use pseudoflow_testenv::apply::apply_text;

/// The Database the bound flow serves, in `default`.
const DATABASE: &str = "postgres-test";

/// The seed 001 files, applied as a user would (`kubectl apply -f ...`), in this order.
const DATABASE_FILES: [&str; 3] = [
    "examples/kopf/database-crd.yaml",
    "examples/kopf/rbac/database.yaml",
    "examples/kopf/database.yaml",
];

/// The approval flow, as written.
const APPROVAL_FILE: &str = "examples/steps/approval.yaml";

/// Applies the bound Database flow, its credentials and one `Database`, and the approval flow;
/// waits until the Database is Running and the approval is waiting.
pub async fn start(client: &kube::Client, repo: &Path) -> Result<()> {
    let read =
        |p: &str| std::fs::read_to_string(repo.join(p)).with_context(|| format!("reading {p}"));
    apply_text(client, &read(DATABASE_FILES[0])?, None).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let established = await_condition(
        crds,
        "databases.example.com",
        conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(30), established)
        .await
        .context("the Database CRD is not established after 30 s")??;
    for f in &DATABASE_FILES[1..] {
        apply_text(client, &read(f)?, None).await?;
    }
    // The owner's Secret (examples/kopf/database.yaml's header), then the Database itself.
    let password = pseudoflow_controller::secret::random_hex();
    let objects = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {DATABASE}-credentials, namespace: default}}\nstringData: {{password: {password}}}\n---\napiVersion: example.com/v1\nkind: Database\nmetadata: {{name: {DATABASE}, namespace: default}}\nspec: {{version: \"15.3\", size: 1Gi}}\n"
    );
    apply_text(client, &objects, None).await?;
    apply_text(client, &read(APPROVAL_FILE)?, None).await?;
    println!(
        "applied {} and a Database {DATABASE}; {APPROVAL_FILE}",
        DATABASE_FILES.join(", ")
    );
    wait_for(
        client,
        "Database default/postgres-test Running",
        database_running,
    )
    .await?;
    // The bound flow's own summary (`kubectl get pf`, `kubectl pf get database`) is written
    // after the object's: wait for it too, so what the closing text suggests agrees.
    wait_for(
        client,
        "flow database counting it Running",
        database_flow_counted,
    )
    .await?;
    wait_for(
        client,
        "flow step-approval waiting for approval",
        approval_waiting,
    )
    .await
}

/// Polls `check` every half second for two minutes, then says how long it took.
async fn wait_for<F, Fut>(client: &kube::Client, what: &str, check: F) -> Result<()>
where
    F: Fn(kube::Client) -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let t0 = Instant::now();
    while !check(client.clone()).await? {
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(120),
            "{what}: not after 120 s (kubectl describe it)"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("{what} after {:.1}s", t0.elapsed().as_secs_f64());
    Ok(())
}

async fn database_running(client: kube::Client) -> Result<bool> {
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Database".into(),
        plural: "databases".into(),
    };
    let dbs: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let db = dbs.get_opt(DATABASE).await?;
    Ok(db.is_some_and(|d| d.data["status"]["phase"] == "Running"))
}

async fn database_flow_counted(client: kube::Client) -> Result<bool> {
    let flows: Api<DynamicObject> = Api::namespaced_with(client, "default", &flow_resource());
    let flow = flows.get_opt("database").await?;
    Ok(flow.is_some_and(|f| {
        let st = &f.data["status"];
        st["phase"] == "Succeeded" && st["bound"]["running"] == 1
    }))
}

async fn approval_waiting(client: kube::Client) -> Result<bool> {
    let flows: Api<DynamicObject> = Api::namespaced_with(client, "default", &flow_resource());
    let flow = flows.get_opt("step-approval").await?;
    Ok(flow.is_some_and(|f| f.data["status"]["reason"] == "WaitingForApproval"))
}

/// The closing text: how to reach the cluster, and what to try on it.
pub fn closing_text(kubeconfig: &Path, tools: &[PathBuf], webhook_url: &str) -> String {
    let path: Vec<String> = tools.iter().map(|p| p.display().to_string()).collect();
    format!(
        r#"
The cluster keeps running, with the controller as the chart installs it: its admission webhooks
at {webhook_url} (validating and mutating), the approval key in pseudoflow-system, bound flows
served as their ServiceAccount. Try:
  export KUBECONFIG={kubeconfig}
  export PATH={path}:$PATH   # kubectl and kubectl-pf, built by make
  kubectl get pf -A
  kubectl describe pf -n kube-system setup-nodelocaldns

A flow bound to a kind (seed 001's Database operator, examples/kopf/database.yaml) serves the
Database {DATABASE}: its pod, status.phase and status.podName; delete it and its onDelete runs.
  kubectl get databases
  kubectl get database {DATABASE} -o jsonpath='{{.status}}{{"\n"}}'
  kubectl get pod {DATABASE}-pod
  kubectl pf get database
A change of the flow is a new revision, rolled out in waves (docs/bound-flows.md#rollouts):
  kubectl patch pf database --type=merge -p '{{"spec": {{"rollout": {{"waves": [1, "50%"]}}, "vars": {{"edition": "2"}}}}}}'
  kubectl pf rollout status database --timeout 2m
  kubectl pf rollout undo database
  kubectl delete database {DATABASE}

An approval waiting (examples/steps/approval.yaml): the run holds at step "promote".
  kubectl pf get step-approval
  kubectl pf approve step-approval promote
  kubectl wait --for=condition=Ready pf/step-approval

A flow that does not compile is refused at apply, every problem with its path:
  kubectl apply --dry-run=server -f - <<< '{{"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {{"name": "typo"}}, "spec": {{"steps": [{{"type": "loop", "forEach": ["a"], "steps": [{{"type": "sleep", "seconds": "ten"}}]}}]}}}}'
Ctrl-C stops everything."#,
        kubeconfig = kubeconfig.display(),
        path = path.join(":"),
    )
}
