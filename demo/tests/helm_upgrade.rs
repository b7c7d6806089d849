//! `helm upgrade` across the change that added `v1beta1` (issue #32 item 1), while a flow runs,
//! on the real API server (testenv), the way a user upgrades: real `helm install` and
//! `helm upgrade` commands against the cluster.
//!
//! Revision 1 is the chart with its CRD as it was before `v1beta1` shipped
//! (`tests/fixtures/crd-pseudoflow-9454a0f.yaml`, from commit 9454a0f: only `v1alpha1`, no
//! `spec.shellQuoting`). A `v1alpha1` flow starts under it and waits for a ConfigMap the test
//! creates only after `helm upgrade` installed the current chart (revision 2, the CRD serving
//! `v1alpha1` and `v1beta1`). Then: the running flow goes on in the same run to Succeeded and
//! still splices `${...}` as written (stored without the field, it reads as `raw` through both
//! versions); a flow created as `v1beta1` after the upgrade is stored `quoted`, reads back the same
//! through `v1alpha1` and quotes; the CRD's storage version and `status.storedVersions` stay
//! `[v1alpha1]`, so no storage migration was needed.
//!
//! Both revisions run the same controller build (the one under test): the controller crossing an
//! upgrade is covered by run state kept in the API (docs/install.md); what this test changes is
//! the CRD, the only part of the chart that decides how a stored flow reads.
//!
//! Last, `helm uninstall` keeps the CRD and both flows (`crds.keep`), and `helm install` of the
//! same release adopts the kept CRD.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::Client;
use pseudoflow_test_support as common;
use pseudoflow_testenv::{apply::apply_text, shared_with, Options, TestEnv};
use serde_json::{json, Value};

const CONTROLLER_IMAGE: &str = "pseudoflow/controller:upgrade";
const RUNTIME_IMAGE: &str = "pseudoflow/runtime:upgrade";
/// The release, and the namespace it is installed in.
const RELEASE: &str = "pf-upgrade";
/// Where the flows run.
const NS: &str = "pf-upgrade-flows";
const CRD: &str = "pseudoflows.ops.example.com";
/// A value whose shell syntax shows whether a command spliced it (`raw`) or quoted it.
const WORD: &str = "a; echo injected";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// This binary's own cluster: nothing installs the CRD but the helm release.
fn env() -> &'static TestEnv {
    let controller = PathBuf::from(common::binaries::controller_binary());
    let step = PathBuf::from(common::step_binary());
    shared_with(move || {
        let mut o = Options::default();
        o.images.insert(CONTROLLER_IMAGE, controller);
        o.images.insert_runtime(RUNTIME_IMAGE, step);
        o
    })
    .unwrap_or_else(|e| panic!("testenv: {e}"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The chart as released before `v1beta1`: today's chart with the CRD template of 9454a0f.
fn chart_before_v1beta1(dir: &Path) -> PathBuf {
    let chart = dir.join("pseudoflow-operator");
    let ok = Command::new("cp")
        .arg("-r")
        .arg(repo().join("charts/pseudoflow-operator"))
        .arg(&chart)
        .status()
        .unwrap();
    assert!(ok.success(), "copying the chart");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crd-pseudoflow-9454a0f.yaml");
    std::fs::copy(fixture, chart.join("templates/crd-pseudoflow.yaml")).unwrap();
    chart
}

/// The values both revisions are installed with (as a user keeps them in a values file).
fn values(env: &TestEnv) -> Vec<String> {
    let (c_repo, c_tag) = CONTROLLER_IMAGE.split_once(':').unwrap();
    let (r_repo, r_tag) = RUNTIME_IMAGE.split_once(':').unwrap();
    let webhook = free_port();
    let sets = [
        format!("image.controller.repository={c_repo}"),
        format!("image.controller.tag={c_tag}"),
        format!("image.runtime.repository={r_repo}"),
        format!("image.runtime.tag={r_tag}"),
        format!("metrics.port={}", free_port()),
        // No service network here: the API server calls the webhook on the loopback address.
        format!("webhook.port={webhook}"),
        format!("webhook.url=https://127.0.0.1:{webhook}/validate"),
        "webhook.certNames={127.0.0.1}".into(),
    ];
    let mut args = vec![
        "--set-file".to_string(),
        format!(
            "webhook.clientAuth.caBundle={}",
            env.webhook_client_ca().display()
        ),
    ];
    for s in sets {
        args.extend(["--set".to_string(), s]);
    }
    args
}

/// `helm VERB RELEASE CHART` against the test cluster, with `values`; what it printed.
fn helm(env: &TestEnv, verb: &str, chart: &Path, values: &[String]) -> String {
    let out = Command::new(common::helm::binary())
        .args([verb, RELEASE])
        .arg(chart)
        .args(["--namespace", RELEASE, "--kubeconfig"])
        .arg(env.kubeconfig_path())
        .args(values)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {verb}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The flows of [`NS`] read through `version`.
fn flows_as(client: &Client, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "ops.example.com".into(),
        version: version.into(),
        api_version: format!("ops.example.com/{version}"),
        kind: "PseudoFlow".into(),
        plural: "pseudoflows".into(),
    };
    Api::namespaced_with(client.clone(), NS, &ar)
}

/// A flow that waits for ConfigMap `go` (when `wait`), echoes [`WORD`] through `${word}` and
/// keeps what the command printed in ConfigMap `<name>-said`.
fn flow(api_version: &str, name: &str, wait: bool) -> Value {
    let mut steps = vec![
        json!({"type": "exec", "cmd": "echo ${word}", "var": "said"}),
        json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-said")}, "data": {"said": "${said}"}}}),
    ];
    if wait {
        steps.insert(
            0,
            json!({"type": "waitFor", "condition": "Exist", "timeoutSeconds": 600,
                "resource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "go"}}),
        );
    }
    json!({"apiVersion": api_version, "kind": "PseudoFlow",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"vars": {"word": WORD}, "steps": steps}})
}

/// Creates `flow`, retrying while the chart's webhook does not answer yet (failure policy Fail).
async fn create(client: &Client, flow: &Value) {
    let text = serde_json::to_string(flow).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while let Err(e) = apply_text(client, &text, None).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the flow was never accepted: {e:#}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the flow's command printed (ConfigMap `<name>-said`).
async fn said(client: &Client, name: &str) -> String {
    let cms = Api::<ConfigMap>::namespaced(client.clone(), NS);
    let cm = cms.get(&format!("{name}-said")).await.unwrap();
    cm.data.unwrap()["said"].clone()
}

/// The CRD's versions as `(name, served, storage)` and its `status.storedVersions`.
async fn crd_versions(client: &Client) -> (Vec<(String, bool, bool)>, Vec<String>) {
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(CRD)
        .await
        .unwrap();
    let versions = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.clone(), v.served, v.storage))
        .collect();
    let stored = crd
        .status
        .and_then(|s| s.stored_versions)
        .unwrap_or_default();
    (versions, stored)
}

/// Waits until the API server serves `version` of the flows (the upgraded CRD is established).
async fn served(client: &Client, version: &str) {
    let api = flows_as(client, version);
    common::eventually(60, &format!("{version} served"), || async {
        api.list(&Default::default()).await.is_ok()
    })
    .await;
}

/// The flows' namespace, whose `default` ServiceAccount may do what the flows do.
async fn flows_namespace(client: &Client) {
    let text = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
         metadata: {{name: flows, namespace: {NS}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}}\n\
         subjects: [{{kind: ServiceAccount, name: default, namespace: {NS}}}]\n"
    );
    apply_text(client, &text, None).await.unwrap();
}

/// Installs revision 1 (the CRD before `v1beta1`) and starts flow `before`, which is left
/// waiting in its first step; returns the id of its run.
async fn install_before_and_start(env: &TestEnv, client: &Client, values: &[String]) -> String {
    let tmp = std::env::temp_dir().join(format!("pf-helm-upgrade-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let old = chart_before_v1beta1(&tmp);
    let mut install = values.to_vec();
    install.push("--create-namespace".into());
    helm(env, "install", &old, &install);
    std::fs::remove_dir_all(&tmp).unwrap();
    served(client, "v1alpha1").await;
    let (versions, stored) = crd_versions(client).await;
    assert_eq!(versions, [("v1alpha1".to_string(), true, true)]);
    assert_eq!(stored, ["v1alpha1"]);
    flows_namespace(client).await;
    create(client, &flow("ops.example.com/v1alpha1", "before", true)).await;
    let status = common::wait_status(client, NS, "before", 90, "waiting for go", |s| {
        s["phase"] == "Running"
            && s["currentStep"]
                .as_str()
                .is_some_and(|c| c.contains("waitFor"))
    })
    .await;
    let stored = flows_as(client, "v1alpha1").get("before").await.unwrap();
    assert!(
        stored.data["spec"].get("shellQuoting").is_none(),
        "the old CRD has no shellQuoting, so the flow is stored without it: {:#}",
        stored.data["spec"]
    );
    status["run"]["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn helm_upgrade_to_v1beta1_under_a_running_flow_keeps_it_raw_needs_no_migration_and_uninstall_keeps_the_crd(
) {
    let env = env();
    let client = env.client().await.unwrap();
    let values = values(env);
    let run = install_before_and_start(env, &client, &values).await;

    helm(
        env,
        "upgrade",
        &repo().join("charts/pseudoflow-operator"),
        &values,
    );
    served(&client, "v1beta1").await;
    let (versions, stored) = crd_versions(&client).await;
    assert_eq!(
        versions,
        [
            ("v1alpha1".to_string(), true, true),
            ("v1beta1".to_string(), true, false)
        ],
        "v1alpha1 stays the storage version"
    );
    assert_eq!(
        stored,
        ["v1alpha1"],
        "nothing was stored in another version"
    );

    // The flow stored before the upgrade reads as raw through both versions.
    for version in ["v1alpha1", "v1beta1"] {
        let f = flows_as(&client, version).get("before").await.unwrap();
        assert_eq!(f.data["spec"]["shellQuoting"], "raw", "read as {version}");
    }
    let mid = common::flows(&client, NS).get("before").await.unwrap();
    assert_eq!(
        mid.data["status"]["phase"], "Running",
        "{:#}",
        mid.data["status"]
    );
    apply_text(
        &client,
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: go, namespace: {NS}}}\n"),
        None,
    )
    .await
    .unwrap();
    let done = common::wait_done(&client, NS, "before", 120).await;
    assert_eq!(done["phase"], "Succeeded", "{done:#}");
    assert_eq!(done["run"]["id"], run.as_str(), "the same run went on");
    assert_eq!(
        said(&client, "before").await,
        "a\ninjected",
        "a flow from before the upgrade splices as it always did"
    );

    after_the_upgrade_v1beta1_is_stored_quoted(&client).await;
    let (_, stored) = crd_versions(&client).await;
    assert_eq!(stored, ["v1alpha1"]);

    uninstall_keeps_the_crd_and_the_flows(env, &client, &values).await;
}

/// `helm uninstall` (issue #43 item 3): the CRD carries `helm.sh/resource-policy: keep`
/// (`crds.keep`, the default), so it and both flows, with their status, stay; the release's own
/// objects go. A second `helm install` of the same release adopts the kept CRD.
async fn uninstall_keeps_the_crd_and_the_flows(env: &TestEnv, client: &Client, values: &[String]) {
    let out = Command::new(common::helm::binary())
        .args(["uninstall", RELEASE, "--namespace", RELEASE, "--kubeconfig"])
        .arg(env.kubeconfig_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm uninstall: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let crd = crds
        .get(CRD)
        .await
        .expect("the CRD outlives helm uninstall");
    assert!(
        crd.metadata.deletion_timestamp.is_none(),
        "the CRD is not being deleted"
    );
    assert_eq!(
        crd.metadata.annotations.unwrap_or_default()["helm.sh/resource-policy"],
        "keep"
    );
    let flows = common::flows(client, NS);
    for name in ["before", "after"] {
        let f = flows
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(f.metadata.deletion_timestamp.is_none(), "{name} is kept");
        assert_eq!(
            f.data["status"]["phase"], "Succeeded",
            "{name}: {:#}",
            f.data
        );
    }
    // The release's own objects are gone (the controller's Deployment is).
    let deployments =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), RELEASE);
    common::eventually(60, "the controller's Deployment deleted", || async {
        deployments
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
    // Installing the release again adopts the kept CRD (helm refuses a CRD it may not own). With
    // the ServiceMonitor and PrometheusRule asked for on this cluster, which does not serve the
    // Prometheus Operator's kinds: installed without them, and the notes say so.
    let mut again = values.to_vec();
    for kind in ["serviceMonitor", "prometheusRule"] {
        again.extend(["--set".to_string(), format!("metrics.{kind}.enabled=true")]);
    }
    let notes = helm(
        env,
        "install",
        &repo().join("charts/pseudoflow-operator"),
        &again,
    );
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        let said = format!(
            "The {kind} was not installed: this cluster does not serve monitoring.coreos.com/v1"
        );
        assert!(notes.contains(&said), "{notes}");
    }
    assert_eq!(
        flows.list(&Default::default()).await.unwrap().items.len(),
        2
    );
}

/// A flow created as `v1beta1` after the upgrade: stored `quoted`, the same read through
/// `v1alpha1` (only `apiVersion` differs), and its command gets [`WORD`] as one word.
async fn after_the_upgrade_v1beta1_is_stored_quoted(client: &Client) {
    create(client, &flow("ops.example.com/v1beta1", "after", false)).await;
    let beta = flows_as(client, "v1beta1").get("after").await.unwrap();
    let alpha = flows_as(client, "v1alpha1").get("after").await.unwrap();
    assert_eq!(beta.data["spec"]["shellQuoting"], "quoted");
    assert_eq!(
        alpha.data["spec"], beta.data["spec"],
        "v1alpha1 reads the same spec"
    );
    assert_eq!(alpha.types.unwrap().api_version, "ops.example.com/v1alpha1");
    let done = common::wait_done(client, NS, "after", 120).await;
    assert_eq!(done["phase"], "Succeeded", "{done:#}");
    assert_eq!(
        said(client, "after").await,
        WORD,
        "quoted: echo got one word"
    );
}
