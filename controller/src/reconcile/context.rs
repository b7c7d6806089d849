//! What every reconcile shares: the client, the executor image, metrics, the Event recorder,
//! the expression engine and the node-step opt-in.

use std::sync::Arc;

use kube::Client;
use pseudoflow_compiler::expr::Engine;

use super::events::EventPublisher;
use super::node_health::NodeHealth;
use super::pod_security;
use crate::metrics::Metrics;

/// Shared by all reconciles.
pub struct Context {
    /// The controller's own client: for its Jobs, Secrets and status, never for a flow's work.
    pub client: Client,
    /// The runtime image executor Jobs run.
    pub image: String,
    /// Prometheus series every reconcile updates.
    pub metrics: Arc<Metrics>,
    /// Publishes the flow's Events.
    pub events: EventPublisher,
    /// The expression engine for controller-local steps (bounded; see docs/expressions.md).
    pub engine: Engine,
    /// Namespaces whose flows may run node steps (root on nodes), if also labelled
    /// `enforce=privileged`; empty unless set, so node steps fail closed.
    pub node_step_namespaces: pod_security::NodeStepNamespaces,
    /// Which nodes can no longer report their node steps' pods (the controller's Node watch).
    pub nodes: NodeHealth,
    /// Whether the watches have synced (`/readyz`).
    pub readiness: Arc<crate::http::Readiness>,
}

impl Context {
    /// A context reporting Events as `pseudoflow-controller`, allowing node steps nowhere (see
    /// [`Context::with_node_step_namespaces`]).
    pub fn new(client: Client, image: String, metrics: Arc<Metrics>) -> Self {
        let instance = std::env::var("HOSTNAME").ok();
        Context {
            events: EventPublisher::new(client.clone(), "pseudoflow-controller", instance),
            client,
            image,
            metrics,
            engine: Engine::new(),
            node_step_namespaces: Default::default(),
            nodes: NodeHealth::default(),
            readiness: Arc::default(),
        }
    }

    /// The same context allowing node steps in `namespaces` (the controller's half of the
    /// opt-in; the namespace must also be labelled `enforce=privileged`).
    pub fn with_node_step_namespaces(
        mut self,
        namespaces: pod_security::NodeStepNamespaces,
    ) -> Self {
        self.node_step_namespaces = namespaces;
        self
    }
}
