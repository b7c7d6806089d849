//! Which API steps the controller runs itself instead of launching an executor Job
//! (docs/decisions.md#api-steps-in-the-controller): the one rule the compiler marks each step
//! with (`compiler/src/placement.rs`, shown by `pseudoflow-compile`) and `kubectl pf logs`
//! explains a step without a pod by.
//!
//! The controller runs a step only when its type says the work is Kubernetes API calls that are
//! safe to repeat ([`StepParams::runs_in_controller`](crate::steps::StepParams::runs_in_controller))
//! and the step did not ask for a pod of its own (`isolate`).

use crate::spec::{ApiSteps, PseudoFlowSpec};
use crate::steps::Placement;
use crate::Step;

/// Where a flow's repeatable API steps run, with the reason `pseudoflow-compile` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiStepsIn {
    /// In executor Jobs (every step a Job, as before).
    Jobs,
    /// In the controller, for the reason given.
    Controller(&'static str),
}

impl ApiStepsIn {
    /// What `spec.options.apiSteps` decides for this flow: Auto runs them in the controller
    /// for a flow bound to a kind (the flow the controller makes per object, and the bound
    /// flow whose steps those are).
    pub fn of(spec: &PseudoFlowSpec) -> Self {
        match spec.options.api_steps {
            ApiSteps::Job => ApiStepsIn::Jobs,
            ApiSteps::Controller => ApiStepsIn::Controller("options.apiSteps: Controller"),
            ApiSteps::Auto if spec.bind.is_some() || spec.bound.is_some() => {
                ApiStepsIn::Controller("bound flow")
            }
            ApiSteps::Auto => ApiStepsIn::Jobs,
        }
    }

    /// Why `step`, placed at `placement`, runs in the controller under this rule; None when it
    /// runs in a Job (or is no API step).
    pub fn runs(self, step: &Step, placement: Placement) -> Option<&'static str> {
        let ApiStepsIn::Controller(reason) = self else {
            return None;
        };
        let repeatable = !step.isolate && step.kind.params().runs_in_controller();
        (placement == Placement::Api && repeatable).then_some(reason)
    }
}
