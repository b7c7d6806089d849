//! [`Context`]: what the controller's reconciles share, in three parts — what both reconcilers
//! use ([`Shared`]), the plain-flow reconciler's own state ([`Runs`]) and the bound-flow
//! reconciler's ([`Binder`]) — plus the readiness the watches report. The dispatch hands each
//! reconcile the shared part and its reconciler's own; neither reconciler sees the other's.

use std::sync::Arc;

use kube::Client;

use crate::bind::Binder;
use crate::flow::accounts::Accounts;
use crate::flow::Shared;
use crate::metrics::Metrics;
use crate::reconcile::history::HistoryLimits;
use crate::reconcile::pod_security::NodeStepNamespaces;
use crate::reconcile::runs::Runs;
use crate::reconcile::seal::RunStateKey;

/// Shared by all reconciles.
pub struct Context {
    /// What reconciles of plain and of bound flows both use.
    pub shared: Shared,
    /// The plain-flow reconciler's state.
    pub runs: Runs,
    /// The bound-flow reconciler's state: its watches of bound kinds (docs/bound-flows.md).
    pub binder: Binder,
    /// Whether the watches have synced (`/readyz`).
    pub readiness: Arc<crate::http::Readiness>,
}

impl Context {
    /// A context reporting Events as `pseudoflow-controller`, running executor Jobs from
    /// `image`, allowing node steps nowhere (see [`Context::with_node_step_namespaces`]).
    pub fn new(client: Client, image: String, metrics: Arc<Metrics>) -> Self {
        let runs = Runs::new(image);
        let binder = Binder::sharing_turns(&runs.in_controller);
        Context {
            shared: Shared::new(client, metrics),
            runs,
            binder,
            readiness: Arc::default(),
        }
    }

    /// The same context giving every flow's executor pods `defaults` under the flow's own.
    pub fn with_executor_defaults(
        mut self,
        defaults: pseudoflow_crd::executor::ExecutorOptions,
    ) -> Self {
        self.runs.executor = defaults;
        self
    }

    /// The same context keeping `limits` finished runs' objects for flows that set none.
    pub fn with_history_limits(mut self, limits: HistoryLimits) -> Self {
        self.runs.history = limits;
        self
    }

    /// The same context accepting approvals (and bound flows' rollout actions) stamped with
    /// `key` (the admission webhook's), and sealing run state with a key derived from it.
    pub fn with_approval_key(mut self, key: crate::approval::Key) -> Self {
        self.runs.run_state_key = RunStateKey::from_approval(&key);
        self.binder.approval_key = Some(key.clone());
        self.runs.approval_key = Some(key);
        self
    }

    /// The same context able to act as a flow's ServiceAccount (bound flows, and API steps the
    /// controller runs itself): `config` is the controller's own client configuration, from
    /// which clients acting as a flow's ServiceAccount are made.
    pub fn with_config(mut self, config: kube::Config) -> Self {
        self.shared.accounts = Accounts::with_config(config);
        self
    }

    /// The same context allowing node steps in `namespaces` (the controller's half of the
    /// opt-in; the namespace must also be labelled `enforce=privileged`).
    pub fn with_node_step_namespaces(mut self, namespaces: NodeStepNamespaces) -> Self {
        self.runs.node_step_namespaces = namespaces;
        self
    }
}
