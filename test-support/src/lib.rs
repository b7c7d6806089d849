//! What the controller's e2e tests and benchmarks share on a testenv cluster: the CRD installed
//! ([`install_crd`]), a namespace whose ServiceAccount `flow` has the rights a flow needs
//! ([`FlowNamespace`]), creating flows and waiting for them by watching ([`flows`]), and reading
//! the Jobs a run left behind ([`jobs`]). Starting a controller stays with each test binary
//! (it picks the image and the node-step opt-in).
#![warn(missing_docs)]

pub mod flows;
pub mod jobs;
mod namespace;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::Client;
use serde_json::Value;

pub use flows::*;
pub use jobs::*;
pub use namespace::FlowNamespace;

/// Server-side applies one object.
pub async fn apply(client: &Client, v: Value) {
    pseudoflow_testenv::apply::apply_value(client, v, None)
        .await
        .unwrap();
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
