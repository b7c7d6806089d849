//! Every helper the e2e tests and benchmarks share on a testenv cluster, in one home: the cluster
//! itself with the runtime and fixture images ([`cluster`]), the CRD installed
//! ([`install_crd`]), a namespace whose ServiceAccount `flow` has the rights a flow needs
//! ([`FlowNamespace`]), an in-process controller for it ([`controller`]), creating flows and
//! waiting for them by watching ([`flows`]), reading the Jobs a run left behind ([`jobs`]), and
//! what one group of tests shares: the admission webhooks ([`admission`]), approval gates
//! ([`approval`]), bound flows ([`bound`]), API-step fixtures ([`api`]), the seed's example
//! flows ([`seed`]), the kopf examples moved into a namespace ([`kopf_examples`]), the step options' shorthands ([`shorthand`]) and the chaos suite's harness
//! ([`chaos`]). A wait for a named condition that shows the objects and their Events when it
//! times out: [`wait`].
//! Every test binary names it `common` (`use pseudoflow_test_support as common;`).
#![warn(missing_docs)]

pub mod admission;
pub mod api;
pub mod approval;
pub mod binaries;
pub mod bound;
pub mod chaos;
pub mod cluster;
pub mod controller;
pub mod flows;
pub mod harness;
pub mod helm;
pub mod jobs;
pub mod kinds;
pub mod kopf_examples;
mod namespace;
pub mod seed;
pub mod shorthand;
pub mod wait;

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::Client;
use serde_json::Value;

pub use binaries::step_binary;
pub use cluster::*;
pub use controller::*;
pub use flows::*;
pub use jobs::*;
pub use kinds::TestKind;
pub use namespace::FlowNamespace;
pub use wait::{wait_until, Shown};

/// Server-side applies one object.
pub async fn apply(client: &Client, v: Value) {
    pseudoflow_testenv::apply::apply_value(client, v, None)
        .await
        .unwrap();
}

/// Grants `ns`'s flow ServiceAccount (`flow`) `verbs` on core `resource` in namespace `at` (a
/// Role and RoleBinding both named after the resource).
pub async fn grant(client: &Client, ns: &str, at: &str, resource: &str, verbs: Value) {
    apply(
        client,
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": resource, "namespace": at},
        "rules": [{"apiGroups": [""], "resources": [resource], "verbs": verbs}]}),
    )
    .await;
    apply(
        client,
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": resource, "namespace": at},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": resource},
        "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]}),
    )
    .await;
}

/// Every Node of the cluster (what node steps, loopNodes and labelling steps act on).
pub async fn all_nodes(client: &Client) -> Vec<k8s_openapi::api::core::v1::Node> {
    Api::all(client.clone())
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
}

/// Installs (or updates) the PseudoFlow CRD and waits until it is served.
pub async fn install_crd(client: &Client) {
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&pseudoflow_crd::schema::crd_yaml()).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        "pseudoflows.ops.example.com",
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(
            crds,
            "pseudoflows.ops.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
}

/// Polls `check` every 200 ms until it holds; panics naming `what` after `secs`.
pub async fn eventually<F, Fut>(secs: u64, what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {secs}s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
