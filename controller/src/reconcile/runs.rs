//! What the plain-flow reconciler keeps across reconciles: how it makes executor Jobs, how it
//! seals and numbers run state, which nodes can still report, and the steps it runs itself.

/// The plain-flow reconciler's state, shared by its reconciles (part of [`crate::Context`]).
#[derive(Default)]
pub struct Runs {
    /// The runtime image executor Jobs run.
    pub image: String,
    /// Namespaces whose flows may run node steps (root on nodes), if also labelled
    /// `enforce=privileged`; empty unless set, so node steps fail closed.
    pub node_step_namespaces: super::pod_security::NodeStepNamespaces,
    /// Which nodes can no longer report their node steps' pods (the controller's Node watch).
    pub nodes: super::node_health::NodeHealth,
    /// Checks the admission webhook's approval stamps; without it no approval is accepted.
    pub approval_key: Option<crate::approval::Key>,
    /// Seals the run state (derived from the approval key, else loaded on first use).
    pub run_state_key: super::seal::RunStateKey,
    /// The highest run-state sequence number stored or seen, per flow: below it, a replay.
    pub sequences: super::seal::Sequences,
    /// The API steps the controller runs itself and their results not yet folded.
    pub in_controller: crate::in_controller::InControllerSteps,
    /// How many finished runs keep their objects when a flow does not say (the chart's).
    pub history: super::history::HistoryLimits,
    /// The executor pods' settings for every flow, under each flow's own (the chart's
    /// `executor` values, `--executor-defaults`).
    pub executor: pseudoflow_crd::executor::ExecutorOptions,
}

impl Runs {
    /// The state of a reconciler whose executor Jobs run `image`, with every other setting at
    /// its default.
    pub fn new(image: String) -> Self {
        Runs {
            image,
            ..Default::default()
        }
    }
}
