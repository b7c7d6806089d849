//! The PseudoFlow controller. [`pseudoflow_walk`] is the pure heart — given a plan, what has
//! happened so far and the time, it says what to start, abort or wait for — and [`reconcile`] is
//! the thin loop around it: observe Jobs, feed results to the walker, launch what it says, write
//! status. [`serve`] dispatches each flow to that reconciler or, for a flow bound to a kind, to
//! [`bind`]'s; what both do to a flow object is [`flow`]. [`leader`] lets several replicas run with one active. One flow can never stop the
//! controller serving the others: flows are read through [`raw`] (a spec nested too deep fails
//! alone, see [`pseudoflow_walk::depth`]), a reconcile that panics or keeps failing fails or
//! backs off alone ([`backoff`]), and what one flow may cost is bounded in [`limits`].
#![warn(missing_docs)]

pub mod approval;
pub mod backoff;
pub mod bind;
pub mod drive;
pub mod flow;
pub mod http;
pub mod in_controller;
pub mod intent;
pub mod labels;
pub mod leader;
pub mod limits;
pub mod metrics;
pub mod raw;
pub mod reconcile;
pub mod redact;
pub mod rollout_by;
pub mod secret;
pub mod serve;
pub mod stopped_by;
pub mod turns;
pub mod webhook;

use std::sync::Arc;

pub use serve::{run_controller, Context};

/// Runs the controller over `namespaces` (one watch each), or over all namespaces when empty.
pub async fn run_controllers(ctx: Arc<Context>, namespaces: Vec<String>) {
    if namespaces.is_empty() {
        return run_controller(ctx, None).await;
    }
    futures::future::join_all(
        namespaces
            .into_iter()
            .map(|ns| run_controller(ctx.clone(), Some(ns))),
    )
    .await;
}
