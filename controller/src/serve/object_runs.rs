//! Where a bound flow's object runs get their tasks (`bind::in_object::tasks`): each is handed
//! the controller's context, as a reconcile of its flow would be, so that it can outlive the
//! reconcile that started it. Held weakly: a context dropped (its controller stopped) runs no
//! more of them.

use std::sync::{Arc, Weak};

use tracing::{info_span, Instrument};

use super::Context;
use crate::bind::in_object::tasks::{Detached, Spawn};
use crate::flow::Reconciling;

/// How each object run of `ctx`'s bound flows is made into a task's work.
pub(super) fn spawner(ctx: Weak<Context>) -> Spawn {
    Arc::new(move |d: Detached| {
        let ctx = ctx.clone();
        Box::pin(async move {
            let Some(ctx) = ctx.upgrade() else {
                return;
            };
            let flow = d.flow.clone();
            let ns = flow.metadata.namespace.clone().unwrap_or_default();
            let name = flow.metadata.name.clone().unwrap_or_default();
            let object = d.object.metadata.name.clone().unwrap_or_default();
            let span = info_span!("object", flow = %format!("{ns}/{name}"), object = %object);
            let r = Reconciling::new(&flow, &ctx.shared, &ns, &name).with(&ctx.binder);
            crate::bind::in_object::finish(&r, d).instrument(span).await;
        })
    })
}
