//! The dispatch above both reconcilers: a deleted flow nothing holds is let go, the spec is
//! compiled (an invalid one reported), the onDelete finalizer made to match, and the flow
//! handed to the bound-flow reconciler ([`crate::bind`]) or the plain-flow one
//! ([`crate::reconcile`]); a flow made for a bound object then writes that object's status.

use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use pseudoflow_compiler::{compile, Compiled};
use pseudoflow_crd::bind::BIND_FINALIZER;
use pseudoflow_crd::Diagnostics;

use super::{warnings, Context};
use crate::flow::events::EventType;
use crate::flow::{finalizer, flow_resource, outcome, released, status, Error, Reconciling};
use crate::limits::{bounded, MAX_STATUS_MESSAGE_CHARS};
use crate::reconcile::on_delete;

/// One reconcile of the flow `ns/name`, whichever kind it is.
pub(super) async fn reconcile_flow(
    flow: &DynamicObject,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Action, Error> {
    let deleting = flow.metadata.deletion_timestamp.is_some();
    let binding = finalizer::has(flow, BIND_FINALIZER);
    if deleting && let_go(ctx, flow, binding, ns, name).await? {
        return Ok(Action::await_change());
    }
    let r = Reconciling::new(flow, &ctx.shared, ns, name);
    // An invalid spec fails before anything runs.
    let compiled = match compile(&r.flow_id, &r.raw_spec) {
        Ok(c) => c,
        Err(diags) => {
            invalid_spec(&r, &diags).await?;
            if deleting && binding {
                // A bound flow deleted after an edit broke it still lets its objects go.
                crate::bind::release(&r.with(&ctx.binder)).await?;
            }
            return Ok(Action::await_change());
        }
    };
    if !hold_for_on_delete(&r, &compiled).await? {
        return Ok(Action::await_change());
    }
    warnings::publish(&r, &compiled).await?;
    if deleting && finalizer::foreground_pending(flow) {
        // The garbage collector is deleting the flow's dependents (a foreground deletion, Argo
        // CD's prune): onDelete's Jobs start once it is done, or it would delete them too. The
        // run state survives it (its Secret holds our finalizer); its end is a flow update.
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    if compiled.spec.bind.is_some() || binding {
        // A flow bound to a kind runs nothing itself: it keeps a flow per object.
        return crate::bind::reconcile_parent(&r.with(&ctx.binder), &compiled.spec).await;
    }
    let r = r.with(&ctx.runs);
    let ran = crate::reconcile::reconcile_run(&r, compiled).await?;
    if let Some(shown) = ran.shown.filter(|_| !deleting) {
        // A flow made for a bound object writes that object's status (docs/bound-flows.md).
        let r = r.with(&ctx.binder);
        crate::bind::write_back(&r, &shown.spec, &shown.status, &shown.vars).await;
    }
    Ok(ran.action)
}

/// Whether a deleted flow has nothing left to run (no finalizer of ours holds it); if so, its
/// run-state sequence is forgotten. The flow as the API has it now decides, not the watch's
/// copy: right after this controller removed its finalizer, the copy may still show it, and the
/// garbage collector may already have deleted the run state, so a reconcile of the copy would
/// start the onDelete run again (the chaos suite saw its Job created twice). One read per
/// reconcile of a flow being deleted.
async fn let_go(
    ctx: &Context,
    flow: &DynamicObject,
    binding: bool,
    ns: &str,
    name: &str,
) -> Result<bool, Error> {
    let uid = flow.metadata.uid.as_deref().unwrap_or_default();
    let mut gone = !on_delete::present(flow) && !binding;
    if !gone {
        let flows: Api<DynamicObject> =
            Api::namespaced_with(ctx.shared.client.clone(), ns, &flow_resource());
        gone = match flows.get_opt(name).await? {
            Some(now) if now.metadata.uid.as_deref() == Some(uid) => {
                !on_delete::present(&now) && !finalizer::has(&now, BIND_FINALIZER)
            }
            _ => true,
        };
    }
    if gone {
        ctx.runs.sequences.forget(uid);
    }
    Ok(gone)
}

/// Sets the onDelete finalizer to match the compiled flow; false when the reconcile ends here
/// (a deleted flow with no onDelete, let go). onDelete steps hold deletion until they ran;
/// without them nothing should. A bound flow's onDelete is its objects' (each runs in the
/// object's own flow), and a flow made for an object that its bound flow released lets its
/// object be.
async fn hold_for_on_delete(r: &Reconciling<'_, ()>, compiled: &Compiled) -> Result<bool, Error> {
    let (flow, flows) = (r.flow, &r.flows);
    let holds = compiled.on_delete.is_some() && compiled.spec.bind.is_none() && !released(flow);
    if !r.deleting && on_delete::present(flow) != holds {
        if holds {
            on_delete::set(flows, flow, true).await?;
        } else {
            // Also releases the run-state Secret the finalizer kept.
            on_delete::remove(flows, flow).await?;
        }
    }
    if r.deleting && !holds && compiled.spec.bind.is_none() {
        on_delete::remove(flows, flow).await?;
        return Ok(false);
    }
    Ok(true)
}

/// Fails the flow `InvalidSpec` listing every error with its path; a flow being deleted with an
/// invalid spec is let go, since no onDelete step can run.
async fn invalid_spec(r: &Reconciling<'_, ()>, diags: &Diagnostics) -> Result<(), Error> {
    let (generation, previous) = (r.generation, &r.previous);
    let errors: Vec<String> = diags
        .errors()
        .map(|d| format!("{}: {}", d.path, d.message))
        .collect();
    let message = format!("{} problem(s): {}", errors.len(), errors.join("; "));
    let message = bounded(&message, MAX_STATUS_MESSAGE_CHARS);
    if !status::already_failed(previous, generation, "InvalidSpec") {
        r.publish(EventType::Warning, "InvalidSpec", &message).await;
        r.ctx.metrics.run_finished(&r.key(), "Failed");
    }
    let invalid = status::invalid(previous, generation, &message, r.now);
    r.told().await;
    outcome::patch_status(&r.flows, r.flow_id.name, status::to_patch(&invalid)).await?;
    if r.deleting {
        on_delete::remove(&r.flows, r.flow).await?;
    }
    Ok(())
}
