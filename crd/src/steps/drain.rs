//! `drain`: cordon a node, then evict its pods through the Eviction API so PodDisruptionBudgets
//! are honoured (a blocked eviction is retried until the step's timeout, then the step fails
//! naming the pod and the budget). DaemonSet pods and mirror pods are left alone, as
//! `kubectl drain` does; pods with emptyDir data are refused unless `deleteEmptyDirData`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cordon::check_node_name;
use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;

/// Default `timeoutSeconds` of a drain (evictions blocked by a budget are retried this long).
pub const DEFAULT_DRAIN_SECONDS: u32 = 600;

/// Longest grace period a drain may give a pod (one hour).
pub const MAX_GRACE_SECONDS: u32 = 3600;

/// How the pods of a drained node are evicted; shared by the `drain` step and loopNodes' `drain:`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainPods {
    /// Seconds each evicted pod gets to stop (default: the pod's own terminationGracePeriodSeconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_GRACE_SECONDS))]
    pub grace_period_seconds: Option<u32>,
    /// Evict pods with emptyDir volumes too (their data is lost); without it such a pod fails
    /// the drain before anything is evicted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_empty_dir_data: bool,
    /// Pods matching this label selector stay on the node (e.g. `app=node-agent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_selector: Option<String>,
}

impl DrainPods {
    /// Checks the skip selector.
    pub fn validate(&self, ctx: &mut Ctx) {
        if let Some(s) = &self.skip_selector {
            ctx.selector("skipSelector", s);
        }
    }
}

/// Cordons `node` (marking the cordon as this flow's when it made the change) and evicts its
/// pods through the Eviction API, so PodDisruptionBudgets hold; waits until they are gone.
/// DaemonSet pods, mirror pods, finished pods and the drain's own pod stay. An eviction a budget
/// blocks is retried until shortly before `timeoutSeconds` (default 600), then the step fails
/// naming the pod and the budget; a failed drain lifts the cordon it made. The flow's
/// ServiceAccount needs nodes get/patch, pods get/list/watch and pods/eviction create.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainStep {
    /// The Node's name; inside loopNodes usually `${node}`.
    pub node: String,
    /// Which pods go and how.
    #[serde(flatten)]
    pub pods: DrainPods,
}

impl StepParams for DrainStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::OnNodes
    }

    fn default_timeout_seconds(&self) -> Option<u32> {
        Some(DEFAULT_DRAIN_SECONDS)
    }

    fn validate(&self, ctx: &mut Ctx) {
        check_node_name(ctx, &self.node);
        self.pods.validate(ctx);
    }
}
