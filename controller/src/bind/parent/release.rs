//! Letting a bound flow's objects go when it is deleted or no longer bound: no `onDelete`
//! runs, each object keeps what it has (docs/bound-flows.md).

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use pseudoflow_crd::bind::{BIND_FINALIZER, RELEASED_ANNOTATION};
use serde_json::json;

use super::children::{children_of, owned_by};
use crate::bind::child::OBJECT_ANNOTATION;
use crate::bind::{in_object, object, pages, Binder};
use crate::flow::events::EventType;
use crate::flow::{finalizer, Error, Reconciling};

/// Lets the objects go, when the bound flow is deleted (also with a spec that no longer
/// compiles) or no longer bound: the finalizer comes
/// off each object, and each child flow is marked released and deleted, so no `onDelete` runs
/// and the objects stay as they are (docs/bound-flows.md). Then the flow's own finalizer goes.
pub(crate) async fn release(r: &Reconciling<'_, Binder>) -> Result<(), Error> {
    let flows = &r.flows;
    r.own.watches.stop(r.uid);
    r.own.forget(&format!("{}/", r.uid));
    r.own.object_runs.stop_flow(r.uid);
    r.own.outcomes.forget(r.uid);
    r.own.revisions.forget(r.uid);
    r.own.child_records.forget(r.uid);
    // A page at a time, as the reconcile lists them (`pages::list_kept`).
    let children = pages::list_kept(flows, &children_of(r.flow_id.name), |c| {
        owned_by(&c, r.uid).then_some(c)
    })
    .await?;
    let fin = object::finalizer_name(r.ns(), r.flow_id.name);
    for c in &children {
        // The child's account is the bound flow's when it was made: known even if the bound
        // flow's spec no longer reads.
        let sa = c.data["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default");
        if let Err(e) = unfinalize_object(r, sa, c, &fin).await {
            let note = format!("removing finalizer {fin} from {}: {e}", object_of(c));
            r.publish(EventType::Warning, "ReleaseFailed", &note).await;
            return Err(e);
        }
        retire(flows, c.metadata.name.as_deref().unwrap_or_default()).await?;
    }
    // Objects served in themselves name no child: the flow's note says where they are.
    if let Err(e) = in_object::release::release(r).await {
        let note = format!("removing finalizer {fin} from the objects it served: {e}");
        r.publish(EventType::Warning, "ReleaseFailed", &note).await;
        return Err(e);
    }
    finalizer::set_named(flows, r.flow, BIND_FINALIZER, false).await?;
    Ok(())
}

/// Deletes child flow `name` marked released: no `onDelete` runs, the object stays as it is.
pub(super) async fn retire(flows: &Api<DynamicObject>, name: &str) -> Result<(), Error> {
    let mark = json!({"metadata": {"annotations": {RELEASED_ANNOTATION: "true"}}});
    flows
        .patch(name, &PatchParams::default(), &Patch::Merge(&mark))
        .await?;
    match flows.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn object_of(child: &DynamicObject) -> String {
    let a = child.metadata.annotations.as_ref();
    a.and_then(|a| a.get(OBJECT_ANNOTATION))
        .cloned()
        .unwrap_or_default()
}

/// Removes `fin` from the object `child` serves, as the flow's ServiceAccount (gone: done).
async fn unfinalize_object(
    r: &Reconciling<'_, Binder>,
    sa: &str,
    child: &DynamicObject,
    fin: &str,
) -> Result<(), Error> {
    let bound = &child.data["spec"]["bound"];
    let obj = &bound["object"];
    let ar = object::resource_of(obj, bound["plural"].as_str().unwrap_or_default());
    let client = r.ctx.accounts.client_as(r.ns(), sa).map_err(Error::Bind)?;
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    match api.get_opt(name).await? {
        Some(o) => Ok(finalizer::set_named(&api, &o, fin, false).await?),
        None => Ok(()),
    }
}
