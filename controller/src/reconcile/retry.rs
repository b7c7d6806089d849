//! `ops.example.com/retry` (what `kubectl pf retry` sets): a new value asks for a retry of the
//! last run — a new run keeping what succeeded (see [`pseudoflow_walk::retry`]). Each value is dealt
//! with once, by the run it started or the run that refused it, so a retry never fires twice
//! and a value already there when a run started (a GitOps manifest) never fires at all.

use kube::ResourceExt;
use pseudoflow_compiler::names::run_id;
use pseudoflow_crd::{RETRY_ANNOTATION, RETRY_FROM_ANNOTATION};
use pseudoflow_walk::includes;

use super::Reconcile;
use crate::flow::events::EventType;
use crate::flow::Error;
use pseudoflow_walk::retry::{retry_run, Request};
use pseudoflow_walk::StoredRun;

/// The `ops.example.com/retry` value on the flow now, if any.
pub fn token(r: &Reconcile<'_>) -> Option<String> {
    r.flow.annotations().get(RETRY_ANNOTATION).cloned()
}

/// `stored`, or the run that retries it when a new retry value asks for one. A refused retry
/// (the run still running, nothing failed, an unknown step) is told in a Warning Event and
/// marked dealt with on `stored`.
pub async fn apply(
    r: &Reconcile<'_>,
    stored: Option<StoredRun>,
    deleting: bool,
) -> Result<Option<StoredRun>, Error> {
    let Some(mut old) = stored else {
        return Ok(None);
    };
    let Some(token) = token(r) else {
        return Ok(Some(old));
    };
    if deleting || old.retry_token.as_deref() == Some(token.as_str()) {
        return Ok(Some(old));
    }
    let from = r.flow.annotations().get(RETRY_FROM_ANNOTATION).cloned();
    let spec = old.spec.clone().unwrap_or(serde_json::Value::Null);
    let compiled = includes::expand(&r.flow_id, &spec, &old.includes)?;
    let trigger = format!("retry {token} of {}", old.run_id);
    let id = run_id(r.uid, old.generation, Some(&trigger));
    let request = Request {
        id: &id,
        token: &token,
        from: from.as_deref(),
        now: r.now,
    };
    match retry_run(&compiled.plan, &old, request) {
        Ok(run) => {
            let kept = run.state.instances.len();
            let note = format!(
                "run {id} retries run {} from {}: {kept} node instances that succeeded kept",
                old.run_id,
                run.retried_from.as_deref().unwrap_or("the failed step"),
            );
            r.publish(EventType::Normal, "Retrying", &note).await;
            Ok(Some(run))
        }
        Err(refused) => {
            // Named by its value, so whoever asked (`kubectl pf retry`) finds its answer.
            let note = format!("retry {token:?} refused: {refused}");
            r.publish(EventType::Warning, "RetryRefused", &note).await;
            old.retry_token = Some(token);
            Ok(Some(old))
        }
    }
}
