//! The two things a reconcile passes around: [`Shared`], what every reconcile of either kind
//! shares (the controller's client, the clients acting as ServiceAccounts, the Event publisher,
//! metrics, the expression engine), and [`Reconciling`], what one reconcile knows of its flow,
//! with a reference to its own reconciler's state (`Own`: the plain flows' or the bound flows').

use std::sync::{Arc, Mutex};

use kube::api::{Api, DynamicObject};
use kube::{Client, Resource};
use pseudoflow_compiler::expr::Engine;
use pseudoflow_compiler::FlowId;
use serde_json::Value;

use super::accounts::Accounts;
use super::events::{EventPublisher, EventType};
use super::{flow_resource, now, outcome};
use crate::metrics::Metrics;

/// Shared by all reconciles, of plain and of bound flows alike.
pub struct Shared {
    /// The controller's own client: for its Jobs, Secrets and status, never for a flow's work.
    pub client: Client,
    /// Prometheus series every reconcile updates.
    pub metrics: Arc<Metrics>,
    /// Publishes the flow's Events (shared with the tasks that publish them off a reconcile's
    /// path: see [`Reconciling::publish`]).
    pub events: Arc<EventPublisher>,
    /// The expression engine for controller-local steps and bound flows' expressions (bounded;
    /// see docs/expressions.md).
    pub engine: Engine,
    /// Clients acting as a flow's ServiceAccount (docs/security.md).
    pub accounts: Accounts,
}

impl Shared {
    /// What reconciles share, reporting Events as `pseudoflow-controller`; no ServiceAccount
    /// can be acted as until [`Accounts::with_config`] is given.
    pub fn new(client: Client, metrics: Arc<Metrics>) -> Self {
        let instance = std::env::var("HOSTNAME").ok();
        Shared {
            events: Arc::new(EventPublisher::new(
                client.clone(),
                "pseudoflow-controller",
                instance,
            )),
            client,
            metrics,
            engine: Engine::new(),
            accounts: Accounts::default(),
        }
    }
}

/// One reconcile of one flow: what every part of it knows of the flow (read once, at its start),
/// passed instead of a handful of arguments to each. Its only I/O is what its methods name
/// ([`Reconciling::publish`], [`Reconciling::told`]).
pub(crate) struct Reconciling<'a, Own> {
    /// What all reconciles share.
    pub ctx: &'a Shared,
    /// What this flow's reconciler keeps across reconciles (`()` while neither is chosen).
    pub own: &'a Own,
    /// The flow as read.
    pub flow: &'a DynamicObject,
    /// Its name and namespace, as the compiler knows it.
    pub flow_id: FlowId<'a>,
    /// Its uid: what owns its Jobs and run state.
    pub uid: &'a str,
    /// The time this reconcile decides at (unix seconds).
    pub now: i64,
    /// The flows of its namespace, for its status, finalizers and children.
    pub flows: Api<DynamicObject>,
    /// Its `metadata.generation`.
    pub generation: i64,
    /// The status as the flow object shows it.
    pub previous: Value,
    /// Its spec as read (not yet compiled).
    pub raw_spec: Value,
    /// Whether the flow is being deleted (its onDelete steps are the plan then).
    pub deleting: bool,
    /// Events this reconcile published that may still be on their way ([`Reconciling::told`]).
    publishing: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The flow, copied once for whatever outlives this reconcile ([`Reconciling::flow_owned`]).
    owned: std::sync::OnceLock<Arc<DynamicObject>>,
}

impl<'a> Reconciling<'a, ()> {
    /// What one reconcile of `flow` (`ns/name`) knows of it before reading anything else.
    pub fn new(flow: &'a DynamicObject, ctx: &'a Shared, ns: &'a str, name: &'a str) -> Self {
        Reconciling {
            ctx,
            own: &(),
            flow,
            flow_id: FlowId {
                name,
                namespace: Some(ns),
            },
            uid: flow.metadata.uid.as_deref().unwrap_or_default(),
            now: now(),
            flows: Api::namespaced_with(ctx.client.clone(), ns, &flow_resource()),
            generation: flow.metadata.generation.unwrap_or(0),
            previous: flow.data.get("status").cloned().unwrap_or(Value::Null),
            raw_spec: flow.data.get("spec").cloned().unwrap_or(Value::Null),
            deleting: flow.metadata.deletion_timestamp.is_some(),
            publishing: Mutex::default(),
            owned: std::sync::OnceLock::new(),
        }
    }
}

impl<'a, Own> Reconciling<'a, Own> {
    /// The same reconcile, handed to the reconciler whose state is `own` (Events still on their
    /// way go with it).
    pub fn with<Other>(self, own: &'a Other) -> Reconciling<'a, Other> {
        Reconciling {
            ctx: self.ctx,
            own,
            flow: self.flow,
            flow_id: self.flow_id,
            uid: self.uid,
            now: self.now,
            flows: self.flows,
            generation: self.generation,
            previous: self.previous,
            raw_spec: self.raw_spec,
            deleting: self.deleting,
            publishing: self.publishing,
            owned: self.owned,
        }
    }

    /// The flow as read, owned: one copy per reconcile, however many tasks it starts (each
    /// bound object's run, `bind/in_object/tasks.rs`) keep it.
    pub fn flow_owned(&self) -> Arc<DynamicObject> {
        self.owned
            .get_or_init(|| Arc::new(self.flow.clone()))
            .clone()
    }

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
        self.publish_about(about, ty, reason, note).await;
    }

    /// [`Reconciling::publish`], about another object than the flow: an object a flow
    /// recorded in its objects served (`kubectl describe` of that object shows it), under the
    /// flow's `options.events`.
    pub async fn publish_about(
        &self,
        about: k8s_openapi::api::core::v1::ObjectReference,
        ty: EventType,
        reason: &str,
        note: &str,
    ) {
        if !self
            .event_policy()
            .publishes(ty == EventType::Warning, reason)
        {
            return;
        }
        let sending = outcome::publish_soon(self.ctx, about, ty, reason, note);
        self.publishing.lock().expect("not poisoned").push(sending);
    }

    /// The flow's `spec.options.events` (All when absent or not one the CRD allows).
    fn event_policy(&self) -> pseudoflow_crd::EventPolicy {
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
}
