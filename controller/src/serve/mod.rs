//! The controller's loop around [`dispatch`] (which hands each flow to the plain-flow or the
//! bound-flow reconciler), built so that one flow can never stop
//! it serving the others: flows are watched raw ([`RawFlow`]: one too deep to decode fails alone),
//! each reconcile runs under [`guard::catching`] (a panic marks that flow Failed), failures back
//! off per flow ([`Backoff`]), and a deleted flow's metrics series are dropped.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::{watcher, PredicateConfig, WatchStreamExt};
use kube::ResourceExt;
use pseudoflow_crd::protocol::journal::{JOURNAL_ROLE, LABEL_ROLE};
use tracing::{error, info_span, warn, Instrument};

mod context;
mod dispatch;
mod guard;
mod object_runs;
mod wake;
pub(crate) mod warnings;

pub use context::Context;

use crate::backoff::{Backoff, WatchBackoff};
use crate::flow::{outcome, Error};
use crate::limits::{MAX_CONCURRENT_RECONCILES, WATCH_PAGE};
use crate::metrics::Metrics;
use crate::raw::{DecodeError, RawFlow};
use crate::reconcile::on_delete;
use dispatch::reconcile_flow;
use pseudoflow_walk::depth::TooDeep;

/// What one controller's reconciles share.
struct LoopState {
    ctx: Arc<Context>,
    backoff: Backoff,
}

/// Runs the controller until the process is told to stop; `namespace` limits it to one.
pub async fn run_controller(ctx: Arc<Context>, namespace: Option<String>) {
    let (flows, jobs, journals): (
        Api<RawFlow>,
        Api<PartialObjectMeta<Job>>,
        Api<PartialObjectMeta<ConfigMap>>,
    ) = (
        scoped(&ctx, &namespace),
        scoped(&ctx, &namespace),
        scoped(&ctx, &namespace),
    );
    let children: Api<RawFlow> = scoped(&ctx, &namespace);
    let spawn = object_runs::spawner(Arc::downgrade(&ctx));
    ctx.binder.object_runs.spawn_with(spawn);
    let shared = Arc::new(LoopState {
        ctx: ctx.clone(),
        backoff: Backoff::default(),
    });
    let writer = Writer::<RawFlow>::default();
    let reader = writer.as_reader();
    let events = flow_events(flows, namespace, shared.clone());
    // A flow's reconcile wakes for what someone asks of it, not for its own status write
    // coming back (`wake::flow_intent`); the reflector still records every change.
    let flows = reflector::reflector(writer, quiet(events, "flows"))
        .applied_objects()
        .predicate_filter(wake::flow_intent, PredicateConfig::default());
    let nodes = quiet(node_watch(&ctx), "nodes");
    Controller::for_stream(flows, reader)
        // Bounded: 1,000 flows created at once must not mean 1,000 reconciles in memory at once
        // (each holds its compiled plan and its run's Jobs).
        .with_config(
            kube::runtime::controller::Config::default().concurrency(MAX_CONCURRENT_RECONCILES),
        )
        // The flow's Jobs (owned by it).
        .watches_stream(
            labelled(jobs, &crate::labels::managed_by_selector(), "jobs"),
            job_owner,
        )
        // A fused segment's journal records a step: show it (and start what follows) now,
        // not when the segment's Job ends. Anyone who may write ConfigMaps can trigger a
        // reconcile this way, which is harmless: the journal's content counts only if signed.
        .watches_stream(
            labelled(
                journals,
                &format!("{LABEL_ROLE}={JOURNAL_ROLE}"),
                "journals",
            ),
            journal_owner,
        )
        // A node that stops reporting: the flows with a step running on it look again (see
        // `NodeHealth`), rather than wait for a pod that can never end.
        .watches_stream(nodes, {
            let ctx = ctx.clone();
            move |node: Node| ctx.runs.nodes.flows_on(&node)
        })
        // A bound flow's child changed (its run's phase): the bound flow sums up again, and
        // lets a deleted object go once its flow is gone.
        .watches_stream(children_watch(&ctx, children), bound_parent)
        // An object of a bound kind changed (docs/bound-flows.md).
        .reconcile_on(ctx.binder.watches.wakes())
        // A step the controller ran itself ended after its reconcile stopped waiting for it.
        .reconcile_on(ctx.runs.in_controller.wakes())
        // One backoff for all watches of the controller: see `WatchBackoff`.
        .trigger_backoff(WatchBackoff::default())
        .run(reconcile, error_policy, shared)
        .for_each(|r| async move {
            if let Err(e) = r {
                warn!("reconcile: {e}");
            }
        })
        .await;
}

/// The controller's API for `K` in `namespace` (all namespaces when `None`).
fn scoped<K>(ctx: &Context, namespace: &Option<String>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(ctx.shared.client.clone(), ns),
        None => Api::all(ctx.shared.client.clone()),
    }
}

/// The Nodes, mirrored into `ctx.runs.nodes`; a refused watch is recorded there (node steps then
/// fail closed) and retried with the others' backoff.
fn node_watch(
    ctx: &Arc<Context>,
) -> impl futures::Stream<Item = Result<Node, watcher::Error>> + Send + 'static {
    let (store, writer) = reflector::store::<Node>();
    ctx.runs.nodes.attach(store);
    let health = ctx.clone();
    let watch = watcher(
        Api::<Node>::all(ctx.shared.client.clone()),
        watcher::Config::default(),
    )
    .backoff(WatchBackoff::default())
    .modify(crate::reconcile::node_health::keep_readiness)
    .inspect(move |ev| match ev {
        // Init comes before the list is even asked for: only what the API answered counts
        // (clearing a refusal at each retry's Init let node steps through between retries).
        Ok(watcher::Event::Init) => {}
        Ok(_) => health.runs.nodes.watch_refused(None),
        Err(e) => health.runs.nodes.watch_refused(refusal(e)),
    });
    reflector::reflector(writer, watch).touched_objects()
}

/// The watch of the flows themselves: it marks the controller ready once they were listed,
/// and drops a deleted flow's metrics series and backoff.
fn flow_events(
    flows: Api<RawFlow>,
    namespace: Option<String>,
    on_event: Arc<LoopState>,
) -> impl futures::Stream<Item = Result<watcher::Event<RawFlow>, watcher::Error>> + Send + 'static {
    // Ready once the flows were listed: told by the watch's own InitDone, not by waiting on the
    // store beside the Controller (kube-runtime's store readiness wakes only its last waiter,
    // so a second waiter can sleep forever: the leading replica then never passed /readyz).
    let mut synced = Some(on_event.ctx.readiness.watch_started());
    let mut gone = Gone::new(namespace);
    watcher(flows, watch_config())
        .backoff(WatchBackoff::default())
        .inspect_ok(move |ev| {
            if matches!(ev, watcher::Event::InitDone) {
                if let Some(s) = synced.take() {
                    s.done();
                }
            }
            let uid = match ev {
                watcher::Event::Delete(f) => f.uid(),
                _ => None,
            };
            for flow in gone.observe(ev, &on_event.ctx.shared.metrics) {
                on_event.ctx.shared.metrics.forget(&flow, uid.as_deref());
                on_event.backoff.reset(&flow);
            }
        })
}

/// How the controller's watches of what others may write list: [`WATCH_PAGE`] items a page,
/// so that one page of large objects is never hundreds of MB held at once (a flow over
/// [`crate::limits::MAX_FLOW_SPEC_BYTES`] is dropped as it is decoded, but its page was read
/// whole first: kube-runtime's default is 500 items a page).
fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(WATCH_PAGE)
}

/// The objects of `api` with labels matching `selector`, as they change: a watch retried with
/// its own backoff, its errors logged and dropped (see [`quiet`]). Jobs and journals are
/// watched as `PartialObjectMeta` (metadata-only requests): their owner is all that is read,
/// and anyone who may write ConfigMaps can label one a journal.
fn labelled<K>(
    api: Api<K>,
    selector: &str,
    what: &'static str,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let watch = watcher(api, watch_config().labels(selector))
        .backoff(WatchBackoff::default())
        .touched_objects();
    quiet(watch, what)
}

/// `stream` with its errors logged and dropped (each watch retries with its own backoff).
/// The controller's triggers share one backoff (`trigger_backoff`): any error of any of them
/// paused all of them, and after an API server restart every watch errs at least once — each
/// more watch made the controller slower to get back to work (the chaos suite measures it).
fn quiet<T: Send + 'static>(
    stream: impl futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    what: &'static str,
) -> impl futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static {
    stream.filter_map(move |r| async move {
        match r {
            Ok(o) => Some(Ok(o)),
            Err(e) => {
                warn!("{what} watch: {e}");
                None
            }
        }
    })
}

/// The flow a Job belongs to (its PseudoFlow owner).
fn job_owner(job: PartialObjectMeta<Job>) -> Option<ObjectRef<RawFlow>> {
    let ns = job.namespace()?;
    job.owner_references()
        .iter()
        .find(|o| o.kind == "PseudoFlow" && o.api_version.starts_with("ops.example.com/"))
        .map(|o| ObjectRef::new(&o.name).within(&ns))
}

/// The API's refusal in a watch error (403, 401), if that is what it is.
fn refusal(e: &watcher::Error) -> Option<String> {
    let api = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s,
        watcher::Error::WatchError(s) => s,
        _ => return None,
    };
    matches!(api.code, 401 | 403).then(|| format!("{} {}", api.code, api.message))
}

/// The flow a journal ConfigMap belongs to (its PseudoFlow owner).
fn journal_owner(cm: PartialObjectMeta<ConfigMap>) -> Option<ObjectRef<RawFlow>> {
    let ns = cm.namespace()?;
    cm.owner_references()
        .iter()
        .find(|o| o.kind == "PseudoFlow" && o.api_version.starts_with("ops.example.com/"))
        .map(|o| ObjectRef::new(&o.name).within(&ns))
}

/// The bound flows' children, passed on only when what the bound flow reads of one changed or
/// it is gone ([`wake::child_changes`]); only then does the bound flow also serve the child's
/// object again.
fn children_watch(
    ctx: &Arc<Context>,
    children: Api<RawFlow>,
) -> impl futures::Stream<Item = Result<RawFlow, watcher::Error>> + Send + 'static {
    let config = watch_config().labels(pseudoflow_crd::bind::BOUND_TO_LABEL);
    let events = watcher(children, config).backoff(WatchBackoff::default());
    let ctx = ctx.clone();
    let changes = wake::child_changes(events, move |child| serve_childs_object(&ctx, child));
    quiet(changes, "bound flows' children")
}

/// The bound flow a child flow serves (its controlling PseudoFlow owner).
fn bound_parent(child: RawFlow) -> Option<ObjectRef<RawFlow>> {
    let ns = child.namespace()?;
    let owner = child
        .owner_references()
        .iter()
        .find(|o| o.kind == "PseudoFlow" && o.controller == Some(true))?;
    Some(ObjectRef::new(&owner.name).within(&ns))
}

/// Has the bound flow that owns `child` serve the child's object again (the child is being
/// deleted or gone, or what it asks changed).
fn serve_childs_object(ctx: &Context, child: &RawFlow) {
    let owner = child
        .owner_references()
        .iter()
        .find(|o| o.kind == "PseudoFlow" && o.controller == Some(true));
    let object = child
        .annotations()
        .get(pseudoflow_crd::bind::OBJECT_ANNOTATION);
    if let (Some(owner), Some(object)) = (owner, object) {
        let (obj_ns, obj_name) = object.split_once('/').unwrap_or(("", object));
        let pending = &ctx.binder.watches.pending;
        pending.changed(&owner.uid, obj_ns, obj_name);
    }
}

/// Failed reconciles of one flow are retried ever less often; others keep their pace. A write
/// the API server refused only because it cannot map the flow's fresh kind yet is retried soon.
fn error_policy(flow: Arc<RawFlow>, err: &Error, shared: Arc<LoopState>) -> Action {
    let key = key_of(&flow);
    let delay = if err.owner_kind_unmapped() {
        shared.backoff.unmapped(&key)
    } else {
        shared.backoff.failed(&key)
    };
    shared.ctx.shared.metrics.reconcile_failed(err.label());
    warn!(flow = %key, "reconcile failed, retrying in {delay:?}: {err}");
    Action::requeue(delay)
}

fn key_of(flow: &RawFlow) -> String {
    format!(
        "{}/{}",
        flow.namespace().unwrap_or_default(),
        flow.name_any()
    )
}

async fn reconcile(flow: Arc<RawFlow>, shared: Arc<LoopState>) -> Result<Action, Error> {
    let key = key_of(&flow);
    let span = info_span!("flow", flow = %key);
    let ctx = &shared.ctx;
    let outcome = guard::catching(decode_and_reconcile(&flow, ctx))
        .instrument(span)
        .await;
    let action = match outcome {
        Ok(result) => result?,
        Err(panicked) => {
            error!(flow = %key, "reconcile panicked: {}", panicked.0);
            let message = format!(
                "{panicked} (while reconciling this flow; the controller goes on serving the \
                 others, and retries this one when it changes)"
            );
            outcome::refuse(&ctx.shared, &flow, "InternalError", &message).await?;
            Action::await_change()
        }
    };
    shared.backoff.reset(&key);
    Ok(action)
}

/// Reconciles the flow once its spec is known to be readable; otherwise fails it, unparsed.
async fn decode_and_reconcile(flow: &RawFlow, ctx: &Context) -> Result<Action, Error> {
    let dynamic = match flow.decode() {
        Ok(d) => d,
        Err(e) => {
            let (reason, message) = match e {
                DecodeError::TooDeep(TooDeep { .. }) => ("InvalidSpec", e.to_string()),
                DecodeError::TooLarge(_) => ("SpecTooLarge", e.to_string()),
                DecodeError::Json(..) => ("InvalidSpec", format!("the flow cannot be read: {e}")),
            };
            outcome::refuse(&ctx.shared, flow, reason, &message).await?;
            on_delete::let_go(&ctx.shared.client, flow).await?;
            return Ok(Action::await_change());
        }
    };
    let (ns, name) = (flow.namespace().unwrap_or_default(), flow.name_any());
    reconcile_flow(&dynamic, ctx, &ns, &name).await
}

/// Tells which flows are gone from the watch: deleted, or missing from a relist (deleted while
/// the watch was down).
struct Gone {
    /// The namespace watched (all when `None`): flows outside it are not this watch's to judge.
    namespace: Option<String>,
    /// The flows listed so far while a relist is under way.
    listing: Option<BTreeSet<String>>,
}

impl Gone {
    fn new(namespace: Option<String>) -> Self {
        Gone {
            namespace,
            listing: None,
        }
    }

    /// The flows (`namespace/name`) `ev` says are gone; `metrics` holds the ones known.
    fn observe(&mut self, ev: &watcher::Event<RawFlow>, metrics: &Metrics) -> Vec<String> {
        match ev {
            watcher::Event::Delete(flow) => vec![key_of(flow)],
            watcher::Event::Init => {
                self.listing = Some(BTreeSet::new());
                vec![]
            }
            watcher::Event::InitApply(flow) => {
                if let Some(listing) = &mut self.listing {
                    listing.insert(key_of(flow));
                }
                vec![]
            }
            watcher::Event::InitDone => {
                let Some(listed) = self.listing.take() else {
                    return vec![];
                };
                let prefix = self.namespace.as_ref().map(|ns| format!("{ns}/"));
                metrics
                    .flows()
                    .into_iter()
                    .filter(|f| prefix.as_ref().is_none_or(|p| f.starts_with(p.as_str())))
                    .filter(|f| !listed.contains(f))
                    .collect()
            }
            watcher::Event::Apply(_) => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use watcher::Event;

    fn flow(ns: &str, name: &str) -> RawFlow {
        serde_json::from_str(&format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"{ns}"}}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn deleted_flows_and_flows_missing_from_a_relist_of_this_namespace_are_gone() {
        let m = Metrics::default();
        for f in ["a/kept", "a/deleted-meanwhile", "b/other-namespace"] {
            m.set_active(f, "uid", true);
        }
        let mut gone = Gone::new(Some("a".into()));
        assert_eq!(
            gone.observe(&Event::Delete(flow("a", "x")), &m),
            ["a/x".to_string()]
        );
        assert!(gone
            .observe(&Event::Apply(flow("a", "kept")), &m)
            .is_empty());
        assert!(gone.observe(&Event::Init, &m).is_empty());
        assert!(gone
            .observe(&Event::InitApply(flow("a", "kept")), &m)
            .is_empty());
        assert_eq!(
            gone.observe(&Event::InitDone, &m),
            ["a/deleted-meanwhile".to_string()]
        );
        // An InitDone without its Init (never happens) judges nothing.
        assert!(gone.observe(&Event::InitDone, &m).is_empty());
        let mut all = Gone::new(None);
        all.observe(&Event::Init, &m);
        assert_eq!(all.observe(&Event::InitDone, &m).len(), 3);
    }
}
