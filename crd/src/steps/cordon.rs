//! `cordon`: mark a node unschedulable before maintenance. The step records on the Node which
//! flow cordoned it, and only when it made the change, so `uncordon` never reopens a node that
//! someone else closed (what system-upgrade-controller gets wrong).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Placement, PlanAs, StepParams};
use crate::check::Ctx;

/// The annotation naming the flow (`<namespace>/<flow>`) whose cordon holds the node closed.
pub const CORDONED_BY_ANNOTATION: &str = "ops.example.com/cordoned-by";

/// The annotation naming the run that set [`CORDONED_BY_ANNOTATION`] (for people reading it).
pub const CORDONED_RUN_ANNOTATION: &str = "ops.example.com/cordoned-run";

/// Marks `node` unschedulable (a no-op on a node that already is, which stays someone else's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CordonStep {
    /// The Node's name; inside loopNodes usually `${node}`.
    pub node: String,
}

impl StepParams for CordonStep {
    fn placement(&self, _: bool) -> Placement {
        Placement::Api
    }

    fn plan_as() -> PlanAs {
        PlanAs::OnNodes
    }

    fn validate(&self, ctx: &mut Ctx) {
        check_node_name(ctx, &self.node);
    }
}

/// The owner mark a flow's cordon carries: `<namespace>/<flow>`. Per flow, not per run, so a
/// later run of the same flow can finish (uncordon) what a failed run left cordoned.
pub fn cordon_owner(namespace: &str, flow: &str) -> String {
    format!("{namespace}/{flow}")
}

/// A node name is a DNS subdomain unless it is computed (`${node}`).
pub(crate) fn check_node_name(ctx: &mut Ctx, node: &str) {
    if node.contains("${") {
        return;
    }
    if !crate::text::is_dns_subdomain(node) {
        ctx.error(
            "node",
            format!(
                "{node:?} is not a node name (a DNS subdomain) or an expression like ${{node}}"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostics;

    #[test]
    fn a_node_is_a_name_or_an_expression() {
        let mut d = Diagnostics::default();
        let step = CordonStep {
            node: "Bad Name".into(),
        };
        step.validate(&mut Ctx::new("spec.steps[0]", &mut d));
        let text = format!("{d:?}");
        assert!(text.contains("spec.steps[0].node"), "{text}");
        let mut d = Diagnostics::default();
        for node in ["worker-0", "${node}"] {
            CordonStep { node: node.into() }.validate(&mut Ctx::new("spec.steps[0]", &mut d));
        }
        assert!(d.is_empty(), "{d:?}");
    }
}
