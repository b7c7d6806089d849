//! `drain`: cordon the node, then evict its pods through the Eviction API (`pods/eviction`),
//! so PodDisruptionBudgets are honoured: an eviction a budget blocks (429) is retried until
//! the step's time is nearly up, then the step fails naming the pod and the budget. Evicted
//! pods are watched until they are gone. A drain that fails lifts the cordon it made itself
//! (never one that was there before), so a failed drain leaves no cordon of its own behind.
//!
//! Evictions go through a client of their own without kube's retry layer: that layer retries
//! 429 after the server's Retry-After and then reports it without the budget's name.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use pseudoflow_crd::protocol::{StepResult, JOB_NAME_ENV};
use pseudoflow_crd::selector::Selector;
use pseudoflow_crd::steps::drain::{DrainStep, DEFAULT_DRAIN_SECONDS};
use serde_json::json;
use tokio::time::Instant;

use super::cordon::{self, Cordoned};
use super::drain_pods::{self, Rules};
use crate::context::ExecCtx;
use crate::error::{api_status, is_forbidden, Call, StepError};

/// How long a blocked eviction waits before it is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(2);

/// At most this many pod names in a message (status stays small on a crowded node).
const NAMES_SHOWN: usize = 10;

/// Runs a `drain` step; `timeout` is what the executor enforces (default 600 s). The drain
/// stops retrying a little before it, so it can fail with its own message and undo its cordon.
pub async fn run(
    ctx: &ExecCtx,
    step: &DrainStep,
    timeout: Option<u32>,
) -> Result<StepResult, StepError> {
    let budget = Duration::from_secs(timeout.unwrap_or(DEFAULT_DRAIN_SECONDS).into());
    let deadline = Instant::now() + budget - (budget / 5).min(Duration::from_secs(10));
    let node = step.node.as_str();
    let cordoned = cordon::cordon(ctx, node).await?;
    match evict_all(ctx, step, deadline).await {
        Ok(done) => {
            let how = match &cordoned {
                Cordoned::Now => "cordoned".to_string(),
                Cordoned::AlreadyOurs => "already cordoned by this flow".to_string(),
                Cordoned::Foreign(by) => format!("already cordoned by {by}"),
            };
            Ok(StepResult::succeeded(
                true,
                format!("node {node} {how}; {done}"),
            ))
        }
        Err(StepError::Failed(why)) if cordoned == Cordoned::Now => {
            let undo = match cordon::uncordon(ctx, node).await {
                Ok(_) => "the cordon this drain made was lifted again".to_string(),
                Err(e) => format!("lifting the cordon this drain made failed too: {e}"),
            };
            Err(StepError::failed(format!("{why}; {undo}")))
        }
        Err(e) => Err(e),
    }
}

fn names(list: &[String]) -> String {
    let mut shown = list
        .iter()
        .take(NAMES_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if list.len() > NAMES_SHOWN {
        shown.push_str(&format!(" and {} more", list.len() - NAMES_SHOWN));
    }
    shown
}

/// Evicts the node's pods and waits until they are gone; returns what happened.
async fn evict_all(
    ctx: &ExecCtx,
    step: &DrainStep,
    deadline: Instant,
) -> Result<String, StepError> {
    let path = &ctx.input.path;
    let node = step.node.as_str();
    let client = ctx.client().await?;
    let skip = match &step.pods.skip_selector {
        Some(s) => Some(
            Selector::parse(s)
                .map_err(|e| StepError::failed(format!("{path}.skipSelector: {e}")))?,
        ),
        None => None,
    };
    let own_job = std::env::var(JOB_NAME_ENV).ok();
    let rules = Rules {
        skip: skip.as_ref(),
        own_job: own_job.as_deref().map(|j| (ctx.namespace(), j)),
        delete_empty_dir_data: step.pods.delete_empty_dir_data,
    };
    let on_node = format!("spec.nodeName={node}");
    let all: Api<Pod> = Api::all(client.clone());
    let pods = all
        .list(&ListParams::default().fields(&on_node))
        .await
        .map_err(|e| ctx.api_err(e, pods_call("list", "pods", "", None)))?;
    let chosen = drain_pods::select(&pods.items, &rules);
    if !chosen.refused.is_empty() {
        return Err(StepError::failed(format!(
            "{path}: node {node} has pods with emptyDir data: {}; set deleteEmptyDirData: true \
             to evict them (that data is lost)",
            names(&chosen.refused)
        )));
    }
    let evictor = eviction_client(ctx).await?;
    let mut evicted = Vec::new();
    for (ns, name, uid) in &chosen.evict {
        evict(
            ctx,
            &evictor,
            ns,
            name,
            step.pods.grace_period_seconds,
            deadline,
        )
        .await?;
        evicted.push((format!("{ns}/{name}"), uid.clone()));
    }
    wait_gone(ctx, all, &on_node, &evicted, deadline).await?;
    let shown: Vec<String> = evicted.into_iter().map(|(n, _)| n).collect();
    let mut done = format!("evicted {} pod(s)", shown.len());
    if !shown.is_empty() {
        done.push_str(&format!(": {}", names(&shown)));
    }
    if !chosen.kept.is_empty() {
        done.push_str(&format!("; left: {}", names(&chosen.kept)));
    }
    Ok(done)
}

fn pods_call<'a>(verb: &'a str, resource: &'a str, name: &'a str, ns: Option<&'a str>) -> Call<'a> {
    Call {
        verb,
        resource,
        name,
        namespace: ns,
    }
}

/// The pod's identity without kube's retry layer (see the module docs).
async fn eviction_client(ctx: &ExecCtx) -> Result<Client, StepError> {
    match kube::Config::infer().await {
        Ok(mut config) => {
            config.default_retry = false;
            Client::try_from(config)
                .map_err(|e| StepError::failed(format!("cannot build a Kubernetes client: {e}")))
        }
        // No configuration to read (tests with an injected client): use the step's own.
        Err(_) => ctx.client().await,
    }
}

/// Why a 429 was returned: the budget and its own words, when the server named one.
fn blocked_by(status: &kube::core::Status) -> String {
    let cause = status
        .details
        .as_ref()
        .and_then(|d| d.causes.iter().find(|c| c.reason == "DisruptionBudget"))
        .map(|c| c.message.clone());
    match cause {
        Some(m) => {
            let budget = m
                .strip_prefix("The disruption budget ")
                .and_then(|r| r.split_whitespace().next());
            match budget {
                Some(b) => format!("PodDisruptionBudget {b} blocks it ({m})"),
                None => m,
            }
        }
        None => status.message.clone(),
    }
}

/// Evicts one pod, retrying while a disruption budget blocks it.
async fn evict(
    ctx: &ExecCtx,
    client: &Client,
    ns: &str,
    name: &str,
    grace: Option<u32>,
    deadline: Instant,
) -> Result<(), StepError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
    });
    if let Some(g) = grace {
        body["deleteOptions"] = json!({"gracePeriodSeconds": g});
    }
    let started = Instant::now();
    loop {
        let r: Result<serde_json::Value, _> = api
            .create_subresource("eviction", name, &PostParams::default(), &body)
            .await;
        let e = match r {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        match api_status(&e) {
            Some(s) if s.code == 404 => return Ok(()),
            Some(s) if s.code == 429 => {
                let why = format!("pod {ns}/{name} cannot be evicted yet: {}", blocked_by(s));
                ctx.note(why.clone());
                if Instant::now() + RETRY_EVERY >= deadline {
                    return Err(StepError::failed(format!(
                        "{}: gave up draining after {}s: {why}",
                        ctx.input.path,
                        started.elapsed().as_secs()
                    )));
                }
                tokio::time::sleep(RETRY_EVERY).await;
            }
            _ if is_forbidden(&e) => {
                return Err(ctx.api_err(e, pods_call("create", "pods/eviction", name, Some(ns))))
            }
            _ => {
                return Err(StepError::failed(format!(
                    "{}: evicting pod {ns}/{name}: {e}",
                    ctx.input.path
                )))
            }
        }
    }
}

/// Watches the node's pods until none of `evicted` (name, uid) is left.
async fn wait_gone(
    ctx: &ExecCtx,
    api: Api<Pod>,
    on_node: &str,
    evicted: &[(String, String)],
    deadline: Instant,
) -> Result<(), StepError> {
    if evicted.is_empty() {
        return Ok(());
    }
    let config = watcher::Config::default().fields(on_node);
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let (mut present, mut listing) = (HashSet::new(), HashSet::new());
    let mut listed = false;
    let uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
    loop {
        let left: Vec<String> = evicted
            .iter()
            .filter(|(_, u)| !listed || present.contains(u))
            .map(|(n, _)| n.clone())
            .collect();
        if listed && left.is_empty() {
            return Ok(());
        }
        ctx.note(format!("evicted pods still on the node: {}", names(&left)));
        let ev = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(ev)) => ev,
            Ok(None) | Err(_) => {
                return Err(StepError::failed(format!(
                    "{}: evicted pods are still on the node: {}",
                    ctx.input.path,
                    names(&left)
                )))
            }
        };
        match ev {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(p)) => {
                listing.insert(uid(&p));
            }
            Ok(Event::InitDone) => {
                present = std::mem::take(&mut listing);
                listed = true;
            }
            Ok(Event::Apply(p)) => {
                present.insert(uid(&p));
            }
            Ok(Event::Delete(p)) => {
                present.remove(&uid(&p));
            }
            Err(watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e))
                if is_forbidden(&e) =>
            {
                return Err(ctx.api_err(e, pods_call("watch", "pods", "", None)))
            }
            Err(e) => tracing::debug!("pod watch: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(v: serde_json::Value) -> kube::core::Status {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_blocked_eviction_names_the_budget_from_the_servers_answer() {
        // What kube-apiserver answers when a budget allows no disruption.
        let s = status(
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "reason": "TooManyRequests", "code": 429,
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget keep-one needs 1 healthy pods and has 1 currently"}]}}),
        );
        assert_eq!(
            blocked_by(&s),
            "PodDisruptionBudget keep-one blocks it (The disruption budget keep-one needs 1 \
             healthy pods and has 1 currently)"
        );
        let bare = status(serde_json::json!({"message": "too many requests", "code": 429}));
        assert_eq!(blocked_by(&bare), "too many requests");
    }

    #[test]
    fn long_pod_lists_are_cut() {
        let pods: Vec<String> = (0..12).map(|i| format!("ns/p{i}")).collect();
        let shown = names(&pods);
        assert!(shown.ends_with("ns/p9 and 2 more"), "{shown}");
    }
}
