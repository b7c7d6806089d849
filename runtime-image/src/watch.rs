//! Waiting on one object by watching it (a fieldSelector on its name): the check runs on the
//! initial list and on every change, never on a fixed timer. The caller's timeout bounds it.

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;

use crate::context::ExecCtx;
use crate::error::{api_status, Call, StepError};
use crate::readiness::Seen;

/// Watches object `name` until `check` (given the object, or None while it does not exist)
/// says done; every verdict's note is recorded so a timeout can say what was last seen.
pub async fn watch_until<F>(
    ctx: &ExecCtx,
    api: Api<DynamicObject>,
    call: Call<'_>,
    check: F,
) -> Result<Option<DynamicObject>, StepError>
where
    F: FnMut(Option<&DynamicObject>) -> Result<Seen, StepError>,
{
    watch_until_with(ctx, api, call, None, check).await
}

/// Like [`watch_until`]; `rewatch_seconds` bounds how long one silent watch request is trusted
/// before the server ends it and it is re-established (`waitFor.intervalSeconds`).
pub async fn watch_until_with<F>(
    ctx: &ExecCtx,
    api: Api<DynamicObject>,
    call: Call<'_>,
    rewatch_seconds: Option<u32>,
    mut check: F,
) -> Result<Option<DynamicObject>, StepError>
where
    F: FnMut(Option<&DynamicObject>) -> Result<Seen, StepError>,
{
    let mut config = watcher::Config::default().fields(&format!("metadata.name={}", call.name));
    if let Some(secs) = rewatch_seconds {
        config = config.timeout(secs.max(1));
    }
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut listing: Option<Option<DynamicObject>> = None;
    while let Some(event) = stream.next().await {
        let current = match event {
            Ok(Event::Init) => {
                listing = Some(None);
                continue;
            }
            Ok(Event::InitApply(o)) => {
                listing = Some(Some(o));
                continue;
            }
            Ok(Event::InitDone) => listing.take().flatten(),
            Ok(Event::Apply(o)) => Some(o),
            Ok(Event::Delete(_)) => None,
            Err(e) => {
                if let Some(k) = forbidden(&e) {
                    let watch = Call {
                        verb: "watch",
                        ..call
                    };
                    return Err(ctx.api_err(k, watch));
                }
                tracing::warn!(error = %e, "watch interrupted; re-establishing");
                continue;
            }
        };
        let seen = check(current.as_ref())?;
        ctx.note(seen.note.clone());
        if seen.done {
            return Ok(current);
        }
    }
    Err(StepError::failed("watch ended unexpectedly"))
}

/// The 403 inside a watcher error, if that is what it is: retrying cannot fix missing RBAC.
fn forbidden(e: &watcher::Error) -> Option<kube::Error> {
    let status = match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => api_status(k)?.clone(),
        watcher::Error::WatchError(s) => (**s).clone(),
        _ => return None,
    };
    (status.code == 403).then(|| kube::Error::Api(Box::new(status)))
}
