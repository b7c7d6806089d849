//! What reconciles work in: [`Context`], shared by all of them (the client, the executor image,
//! metrics, the Event publisher, the expression engine and the node-step opt-in), and
//! [`Reconciling`], what every part of one reconcile needs to know about its flow.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, Resource};
use pseudoflow_compiler::expr::Engine;
use pseudoflow_compiler::FlowId;
use pseudoflow_crd::spec::EventPolicy;

use super::events::{EventPublisher, EventType};
use super::node_health::NodeHealth;
use super::{flow_resource, observe, outcome, pod_security, Error};
use crate::metrics::Metrics;

/// Shared by all reconciles.
pub struct Context {
    /// The controller's own client: for its Jobs, Secrets and status, never for a flow's work.
    pub client: Client,
    /// The runtime image executor Jobs run.
    pub image: String,
    /// Prometheus series every reconcile updates.
    pub metrics: Arc<Metrics>,
    /// Publishes the flow's Events (shared with the tasks that publish them off a reconcile's
    /// path: see [`Reconciling::publish`]).
    pub events: Arc<EventPublisher>,
    /// The expression engine for controller-local steps (bounded; see docs/expressions.md).
    pub engine: Engine,
    /// Namespaces whose flows may run node steps (root on nodes), if also labelled
    /// `enforce=privileged`; empty unless set, so node steps fail closed.
    pub node_step_namespaces: pod_security::NodeStepNamespaces,
    /// Which nodes can no longer report their node steps' pods (the controller's Node watch).
    pub nodes: NodeHealth,
    /// Whether the watches have synced (`/readyz`).
    pub readiness: Arc<crate::http::Readiness>,
    /// Checks the admission webhook's approval stamps; without it no approval is accepted.
    pub approval_key: Option<crate::approval::Key>,
    /// Seals the run state (derived from the approval key, else loaded on first use).
    pub run_state_key: super::seal::RunStateKey,
    /// The highest run-state sequence number stored or seen, per flow: below it, a replay.
    pub sequences: super::seal::Sequences,
    /// Flows bound to a kind: their watches and ServiceAccount clients (docs/bound-flows.md).
    pub binder: crate::bind::Binder,
    /// The API steps the controller runs itself and their results not yet folded.
    pub in_controller: crate::in_controller::InControllerSteps,
    /// How many finished runs keep their objects when a flow does not say (the chart's).
    pub history: super::history::HistoryLimits,
    /// The executor pods' settings for every flow, under each flow's own (the chart's
    /// `executor` values, `--executor-defaults`).
    pub executor: pseudoflow_crd::executor::ExecutorOptions,
}

impl Context {
    /// A context reporting Events as `pseudoflow-controller`, allowing node steps nowhere (see
    /// [`Context::with_node_step_namespaces`]).
    pub fn new(client: Client, image: String, metrics: Arc<Metrics>) -> Self {
        let instance = std::env::var("HOSTNAME").ok();
        Context {
            events: Arc::new(EventPublisher::new(
                client.clone(),
                "pseudoflow-controller",
                instance,
            )),
            client,
            image,
            metrics,
            engine: Engine::new(),
            node_step_namespaces: Default::default(),
            nodes: NodeHealth::default(),
            readiness: Arc::default(),
            approval_key: None,
            run_state_key: Default::default(),
            sequences: Default::default(),
            binder: Default::default(),
            in_controller: Default::default(),
            history: Default::default(),
            executor: Default::default(),
        }
    }

    /// The same context giving every flow's executor pods `defaults` under the flow's own.
    pub fn with_executor_defaults(
        mut self,
        defaults: pseudoflow_crd::executor::ExecutorOptions,
    ) -> Self {
        self.executor = defaults;
        self
    }

    /// The same context keeping `limits` finished runs' objects for flows that set none.
    pub fn with_history_limits(mut self, limits: super::history::HistoryLimits) -> Self {
        self.history = limits;
        self
    }

    /// The same context accepting approvals stamped with `key` (the admission webhook's), and
    /// sealing run state with a key derived from it.
    pub fn with_approval_key(mut self, key: crate::approval::Key) -> Self {
        self.run_state_key = super::seal::RunStateKey::from_approval(&key);
        self.approval_key = Some(key);
        self
    }

    /// The same context able to serve bound flows: `config` is the controller's own client
    /// configuration, from which clients acting as a flow's ServiceAccount are made.
    pub fn with_config(mut self, config: kube::Config) -> Self {
        self.binder = crate::bind::Binder::with_config(config);
        self
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

/// One reconcile of one flow: what every part of it needs to know, passed instead of five
/// arguments to each.
pub(crate) struct Reconciling<'a> {
    /// What all reconciles share.
    pub ctx: &'a Context,
    /// The flow as read (its spec already known to decode).
    pub flow: &'a DynamicObject,
    /// Its name and namespace, as the compiler knows it.
    pub flow_id: FlowId<'a>,
    /// Its uid: what owns its Jobs and run state.
    pub uid: &'a str,
    /// The time this reconcile decides at (unix seconds).
    pub now: i64,
    /// Events this reconcile published that may still be on their way ([`Reconciling::told`]).
    pub publishing: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Reconciling<'_> {
    /// The flow's namespace.
    pub fn ns(&self) -> &str {
        self.flow_id.namespace.unwrap_or_default()
    }

    /// `namespace/name`, as metrics name the flow.
    pub fn key(&self) -> String {
        format!("{}/{}", self.ns(), self.flow_id.name)
    }

    /// Publishes an Event about the flow without waiting for the API: a step's Events are
    /// sent while the step runs and its state is saved, not one round trip after another on
    /// the way to its object's status. [`Reconciling::told`] waits for them.
    /// Events the flow's `options.events` leaves out are not published at all.
    pub async fn publish(&self, ty: EventType, reason: &str, note: &str) {
        if !self
            .event_policy()
            .publishes(ty == EventType::Warning, reason)
        {
            return;
        }
        let about = self.flow.object_ref(&flow_resource());
        let sending = outcome::publish_soon(self.ctx, about, ty, reason, note);
        self.publishing.lock().expect("not poisoned").push(sending);
    }

    /// The flow's `spec.options.events` (All when absent or not one the CRD allows).
    fn event_policy(&self) -> EventPolicy {
        self.flow
            .data
            .pointer("/spec/options/events")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    }

    /// Waits until every Event this reconcile published has reached the API (or failed to,
    /// logged): called before the flow's status is written, so whoever sees a phase also sees
    /// the Events that led to it.
    pub async fn told(&self) {
        let sending = std::mem::take(&mut *self.publishing.lock().expect("not poisoned"));
        for s in sending {
            let _ = s.await;
        }
    }

    /// Deletes every Job of an older run (concurrencyPolicy Replace, deletion).
    pub async fn abort_run(&self, old: &str) -> Result<(), Error> {
        let selector = crate::labels::run_selector(old);
        observe::delete_owned_jobs(&self.ctx.client, self.ns(), self.uid, &selector).await?;
        self.ctx.metrics.run_finished(&self.key(), "Aborted");
        let note = format!("run {old} aborted: a new run replaces it");
        self.publish(EventType::Normal, "RunReplaced", &note).await;
        Ok(())
    }

    /// Whether a Job of `run_id` is still running (a run of an older spec, waited for).
    pub async fn jobs_running(&self, run_id: &str) -> Result<bool, Error> {
        let selector = crate::labels::run_selector(run_id);
        Ok(Api::<Job>::namespaced(self.ctx.client.clone(), self.ns())
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .iter()
            .any(|j| {
                j.status
                    .as_ref()
                    .is_none_or(|s| s.completion_time.is_none() && s.failed.unwrap_or(0) == 0)
            }))
    }
}
