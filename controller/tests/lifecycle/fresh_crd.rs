//! A flow applied right after the PseudoFlow CRD was installed (`helm install` then
//! `kubectl apply`), on a cluster of its own: the API server's
//! `OwnerReferencesPermissionEnforcement` cannot map a kind created since its RESTMapper last
//! reset (every 30 s), so the controller's first writes owned with `blockOwnerDeletion` are
//! refused 403 until then. The flow must run within a few seconds of that reset, not after the
//! next step of a doubling backoff.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::Client;
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{run_controller, Context};
use pseudoflow_testenv::{Options, TestEnv};
use serde_json::json;

use crate::common::bound::controller_config_in;
use crate::common::{apply, create_flow, install_crd, wait_done, FlowNamespace, IMAGE};

/// Part of the message `OwnerReferencesPermissionEnforcement` refuses with when it cannot map
/// the owner's kind (k8s v1.34 `plugin/pkg/admission/gc/gc_admission.go`).
const UNMAPPED: &str = "cannot find RESTMapping";

/// Whether the API server's admission can map `api_version`/`kind` now: a dry-run Secret owned
/// by such an object with `blockOwnerDeletion`, created as `client` (an identity that may not
/// set finalizers on everything, so admission looks the kind up).
async fn admission_maps(client: &Client, ns: &str, api_version: &str, kind: &str) -> bool {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"generateName": "probe-", "ownerReferences": [{
            "apiVersion": api_version, "kind": kind, "name": "probe",
            "uid": "00000000-0000-0000-0000-000000000001", "blockOwnerDeletion": true}]},
    }))
    .unwrap();
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match Api::<Secret>::namespaced(client.clone(), ns)
        .create(&pp, &secret)
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(s)) => !s.message.contains(UNMAPPED),
        Err(e) => panic!("probe: {e}"),
    }
}

/// Installs a throwaway CRD `kind` and polls until admission maps it: that is the moment the API
/// server's RESTMapper was reset, and the successful look-up filled it again (without any kind
/// created after). Returns that moment, or None when the kind mapped at once (no reset seen).
async fn reset_seen(admin: &Client, probe: &Client, ns: &str, kind: &str) -> Option<Instant> {
    let plural = format!("{}s", kind.to_lowercase());
    let name = format!("{plural}.probe.example.com");
    apply(admin, json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": "probe.example.com", "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await
    .unwrap()
    .unwrap();
    if admission_maps(probe, ns, "probe.example.com/v1", kind).await {
        return None;
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(40) {
        if admission_maps(probe, ns, "probe.example.com/v1", kind).await {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("admission never mapped {kind} in 40 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_applied_before_the_api_server_maps_its_kind_runs_right_after_it_does() {
    let mut opts = crate::common::options();
    opts.nodes = Options::with_nodes(2).nodes;
    let env = TestEnv::start(opts).await.unwrap();
    let admin = env.client().await.unwrap();
    let ns = FlowNamespace::new("freshcrd")
        .rules(json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]))
        .create(&env, &admin)
        .await;
    // The controller as the chart installs it: its ClusterRole, not the admin's rights (which
    // may set finalizers on anything, so admission never looks the owner's kind up).
    let config = controller_config_in(&env, &admin, &ns).await;
    let controller = Client::try_from(config.clone()).unwrap();

    // Wait for a reset of the API server's RESTMapper, then install the CRD at once: admission
    // cannot map PseudoFlow until the next reset, about 30 s later.
    let mut reset = None;
    for kind in ["ProbeA", "ProbeB", "ProbeC"] {
        reset = reset_seen(&admin, &controller, &ns, kind).await;
        if reset.is_some() {
            break;
        }
    }
    let reset = reset.expect("a RESTMapper reset seen");
    install_crd(&admin).await;
    let api_version = "ops.example.com/v1alpha1";
    assert!(
        !admission_maps(&controller, &ns, api_version, "PseudoFlow").await,
        "admission maps PseudoFlow at once: nothing reproduced"
    );
    let ctx = Context::new(
        controller.clone(),
        IMAGE.into(),
        Arc::new(Metrics::default()),
    )
    .with_config(config);
    let ctl = tokio::spawn(run_controller(Arc::new(ctx), Some(ns.clone())));

    // Applied 17 s before the next reset: a doubling backoff (2, 4, 8, 16 s) from here retries
    // 3 s before it and then 13 s after it.
    tokio::time::sleep_until((reset + Duration::from_secs(13)).into()).await;
    create_flow(
        &admin,
        &ns,
        "first",
        json!({
            "serviceAccountName": "flow",
            "steps": [{"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "made", "namespace": ns}, "data": {"a": "b"}}}]
        }),
    )
    .await;
    let watcher = {
        let (controller, ns) = (controller.clone(), ns.clone());
        tokio::spawn(async move {
            while !admission_maps(&controller, &ns, api_version, "PseudoFlow").await {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Instant::now()
        })
    };
    let status = wait_done(&admin, &ns, "first", 90).await;
    let done = Instant::now();
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let mapped = watcher.await.unwrap();
    let after = done.saturating_duration_since(mapped);
    eprintln!(
        "RESTMapper reset {:?} after the one seen; flow Succeeded {after:?} after it",
        mapped - reset
    );
    assert!(
        after < Duration::from_secs(8),
        "the flow Succeeded {after:?} after the API server could map its kind"
    );
    ctl.abort();
}
