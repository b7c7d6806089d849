//! What both reconcilers do to a flow object, whichever kind it is: its status
//! ([`status`], written through [`outcome`]), its finalizers ([`finalizer`]), its Events
//! ([`events`]), the clients acting as its ServiceAccount ([`accounts`]), and the two context
//! types a reconcile passes around ([`Shared`], [`Reconciling`]). Neither the plain-flow
//! reconciler ([`crate::reconcile`]) nor the bound-flow one ([`crate::bind`]) is imported here:
//! both import this, and the dispatch above them ([`crate::serve`]) chooses between them.

pub mod accounts;
mod context;
mod error;
pub mod events;
pub mod finalizer;
pub mod outcome;
pub mod status;

pub(crate) use context::Reconciling;
pub use context::Shared;
pub use error::Error;

use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::broadcast;

use crate::raw::RawFlow;
use pseudoflow_crd::bind::RELEASED_ANNOTATION;

/// The PseudoFlow resource as seen untyped: a flow with a broken nested step must still be read,
/// so the controller can report `InvalidSpec` instead of failing to deserialize it.
pub fn flow_resource() -> ApiResource {
    ApiResource::erase::<pseudoflow_crd::PseudoFlow>(&())
}

/// The time reconciles decide at (unix seconds).
pub(crate) fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

/// Whether the bound flow released this child (it is being deleted or no longer bound): then
/// deleting the child runs no `onDelete`.
pub fn released(flow: &DynamicObject) -> bool {
    flow.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(RELEASED_ANNOTATION))
}

/// The flows named on `rx` (namespace, name), as a controller's `reconcile_on` stream: how a
/// bound kind's watch and a step the controller ran itself wake their flows.
pub fn wake_stream(
    rx: broadcast::Receiver<(String, String)>,
) -> impl futures::Stream<Item = ObjectRef<RawFlow>> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok((ns, name)) => return Some((ObjectRef::new(&name).within(&ns), rx)),
                // Missed wakes: the flows still get their periodic look.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}
