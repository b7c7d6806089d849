//! The validating admission webhook for PseudoFlows (`POST /validate`): a flow is created or
//! its spec changed only if it compiles, with every problem the compiler finds reported at once,
//! each with its path — the same diagnostics as `pseudoflow-compile` — so `kubectl apply`,
//! `--dry-run=server` and an Argo CD sync refuse a bad flow instead of showing it green and
//! failing it later as `InvalidSpec`.
//!
//! Never blocked: deletes, the status subresource, and updates that leave the spec as it was
//! (labels, annotations, finalizers: a flow that became invalid under a stricter release must
//! still be deletable, and the controller must still be able to remove its finalizer).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::{Extension, Json};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use pseudoflow_compiler::{compile, FlowId};
use serde_json::Value;

/// Who sent a request, as its connection's handshake proved (`crate::http` marks each request
/// with it): a request extension the handlers read (a request served without that listener, a
/// test's, carries none: unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The client certificate of the API server (the chart's `webhook.clientAuth`).
    ApiServer,
    /// Anyone who reached the port: no client CA is configured.
    Unauthenticated,
}

pub mod approval;
pub mod decode;
pub mod stamp;
#[cfg(test)]
pub(crate) mod testing;

/// At most this many problems are listed in a refusal (the rest are counted).
pub const MAX_LISTED: usize = 50;

/// The refusal of an approval decision (or a rollout action) from a caller not proven to be
/// the API server.
pub const UNAUTHENTICATED_APPROVAL: &str =
    "approval decisions and rollout actions are checked only for the API server, proven by its \
     client certificate, and this webhook has no client CA (--webhook-client-ca; \
     docs/operations.md): it answers no approval question";

/// The webhook's shared state.
#[derive(Clone)]
pub struct Webhook {
    /// The controller's client: asks the API server whether a user may approve.
    pub client: kube::Client,
    /// Signs approval stamps (`/mutate`); without it decisions are refused there.
    pub key: Option<crate::approval::Key>,
    /// The estimated decoded bytes ([`decode`]) all reviews may hold at once.
    pub decoding: Arc<tokio::sync::Semaphore>,
    /// Whether approval questions are answered to callers the server did not authenticate
    /// (`--webhook-unauthenticated-approvals`: chosen, with its risk, docs/security.md).
    pub any_caller_approves: bool,
}

/// Estimated decoded bytes ([`decode::scan`]) of all reviews being decoded and answered at
/// once: with the bodies' own budget ([`crate::http::bounds::BODY_BUDGET_BYTES`]) this bounds
/// what admission holds in memory however many reviews arrive together. A review waits
/// [`DECODE_WAIT`] for its share, then is refused (the API server's caller may retry).
pub const DECODE_BUDGET_BYTES: usize = 64 << 20;

/// How long a review waits for its share of [`DECODE_BUDGET_BYTES`] (the API server waits at
/// most the chart's `timeoutSeconds`, 10).
pub const DECODE_WAIT: Duration = Duration::from_secs(5);

impl Webhook {
    /// A webhook asking authorization questions through `client`, with no approval key.
    pub fn new(client: kube::Client) -> Arc<Webhook> {
        Webhook::made(client, None, false)
    }

    /// A webhook that also stamps approval decisions with `key`.
    pub fn with_key(client: kube::Client, key: crate::approval::Key) -> Arc<Webhook> {
        Webhook::made(client, Some(key), false)
    }

    /// A webhook stamping with `key` for any caller that reaches its port, authenticated or
    /// not (`--webhook-unauthenticated-approvals`).
    pub fn for_any_caller(client: kube::Client, key: crate::approval::Key) -> Arc<Webhook> {
        Webhook::made(client, Some(key), true)
    }

    /// What the constructors above share: the whole decode budget free.
    fn made(
        client: kube::Client,
        key: Option<crate::approval::Key>,
        any_caller_approves: bool,
    ) -> Arc<Webhook> {
        Arc::new(Webhook {
            client,
            key,
            decoding: Arc::new(tokio::sync::Semaphore::new(DECODE_BUDGET_BYTES)),
            any_caller_approves,
        })
    }

    /// Refuses, without asking anyone, to answer whether a request's user may approve unless
    /// the caller is the API server as its client certificate proved (or any caller was
    /// allowed on purpose): otherwise any pod reaching the port could post reviews naming any
    /// user and learn from the answer who may approve what (and drive SubjectAccessReviews as
    /// the controller). The refusal is the same whoever the review names.
    pub fn may_ask_about_approvals(&self, caller: Option<Caller>) -> Result<(), String> {
        if caller == Some(Caller::ApiServer) || self.any_caller_approves {
            return Ok(());
        }
        Err(UNAUTHENTICATED_APPROVAL.to_string())
    }

    /// The review in `body`, decoded once it is within [`decode::Limits`] and its estimated
    /// decoded size is held of [`DECODE_BUDGET_BYTES`] (given back when the permit drops); or
    /// the denial to answer with, naming why.
    pub async fn decode(
        &self,
        body: &[u8],
    ) -> Result<
        (
            AdmissionReview<DynamicObject>,
            tokio::sync::OwnedSemaphorePermit,
        ),
        AdmissionResponse,
    > {
        let limits = decode::Limits::default();
        let scanned = decode::scan(body, limits).map_err(|r| {
            tracing::info!("admission review refused: {}", r.why);
            r.response()
        })?;
        let share = scanned.decoded_bytes.clamp(1, DECODE_BUDGET_BYTES) as u32;
        let permit =
            tokio::time::timeout(DECODE_WAIT, self.decoding.clone().acquire_many_owned(share))
                .await;
        let Ok(Ok(permit)) = permit else {
            let mut busy = AdmissionResponse::invalid(format!(
                "the webhook is decoding {} MiB of other admission reviews; try again",
                DECODE_BUDGET_BYTES >> 20
            ));
            busy.uid = scanned.uid;
            return Err(busy);
        };
        let review = serde_json::from_slice(body).map_err(|e| {
            AdmissionResponse::invalid(format!("the admission review cannot be decoded: {e}"))
        })?;
        Ok((review, permit))
    }

    /// What both handlers (`/validate`, `/mutate`) do around their own answer: the review in
    /// `body` decoded ([`Webhook::decode`], its share of the budget held until the answer is
    /// made), its request answered by `answer`, and the response as a review; a review refused
    /// or not decodable, or holding no valid request, is answered here.
    pub async fn answer_review<F, Fut>(
        &self,
        body: &[u8],
        answer: F,
    ) -> AdmissionReview<DynamicObject>
    where
        F: FnOnce(AdmissionRequest<DynamicObject>) -> Fut,
        Fut: std::future::Future<Output = AdmissionResponse>,
    {
        let (review, _held) = match self.decode(body).await {
            Ok(decoded) => decoded,
            Err(denied) => return denied.into_review(),
        };
        let request: Result<AdmissionRequest<DynamicObject>, _> = review.try_into();
        let response = match request {
            Ok(req) => answer(req).await,
            Err(e) => AdmissionResponse::invalid(e),
        };
        response.into_review()
    }
}

/// The webhook as its handlers receive it from whichever server routes to them (the
/// controller's: [`crate::http`] derives it from its state); `None` serves no webhook (404).
#[derive(Clone)]
pub struct Admission(pub Option<Arc<Webhook>>);

/// `POST /validate`: an AdmissionReview in, the same with its response out. 404 when the
/// server runs without the webhook.
pub async fn handle(
    State(Admission(webhook)): State<Admission>,
    caller: Option<Extension<Caller>>,
    body: Bytes,
) -> Result<Json<AdmissionReview<DynamicObject>>, axum::http::StatusCode> {
    let Some(webhook) = webhook else {
        return Err(axum::http::StatusCode::NOT_FOUND);
    };
    let hook = &*webhook;
    let caller = caller.map(|c| c.0);
    let review = hook
        .answer_review(
            &body,
            |req| async move { validate(hook, &req, caller).await },
        )
        .await;
    Ok(Json(review))
}

/// The validating answer to one request: its spec reviewed, then, if it makes an approval
/// decision, whether its user may.
async fn validate(
    webhook: &Webhook,
    req: &AdmissionRequest<DynamicObject>,
    caller: Option<Caller>,
) -> AdmissionResponse {
    let spec = review_request(req);
    if !spec.allowed || approval::decisions(req).is_empty() {
        spec
    } else if let Err(refusal) = webhook.may_ask_about_approvals(caller) {
        spec.deny(refusal)
    } else {
        match approval::authorize(&webhook.client, req).await {
            Ok(()) => spec,
            Err(refusal) => spec.deny(refusal),
        }
    }
}

/// The webhook's decision on one request.
pub fn review_request(req: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let allow = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) || req.sub_resource.is_some()
    {
        return allow;
    }
    let Some(obj) = &req.object else {
        return allow.deny("no object in the request");
    };
    if obj.metadata.deletion_timestamp.is_some() {
        return allow;
    }
    let spec = obj.data.get("spec").unwrap_or(&Value::Null);
    if req.operation == Operation::Update {
        let old_spec = req
            .old_object
            .as_ref()
            .and_then(|o| o.data.get("spec"))
            .unwrap_or(&Value::Null);
        if old_spec == spec {
            return allow;
        }
    }
    let name = obj.metadata.name.as_deref().unwrap_or(req.name.as_str());
    let namespace = obj
        .metadata
        .namespace
        .as_deref()
        .or(req.namespace.as_deref());
    // The controller would not read it (crate::raw): refused now, naming the limit.
    let bytes = crate::raw::json_bytes(spec);
    if bytes > crate::limits::MAX_FLOW_SPEC_BYTES {
        let why = crate::raw::DecodeError::TooLarge(bytes).to_string();
        return allow.deny(refusal(name, &[why]));
    }
    let id = FlowId { name, namespace };
    match compile(&id, spec) {
        Ok(compiled) => {
            let mut allow = allow;
            let warnings: Vec<String> = compiled
                .warnings
                .warnings()
                .map(|d| format!("{}: {}", d.path, d.message))
                .collect();
            if !warnings.is_empty() {
                allow.warnings = Some(warnings);
            }
            allow
        }
        Err(diags) => {
            let errors: Vec<String> = diags
                .errors()
                .map(|d| format!("{}: {}", d.path, d.message))
                .collect();
            allow.deny(refusal(name, &errors))
        }
    }
}

/// The refusal message: how many problems, then each on its own line with its path.
pub fn refusal(name: &str, errors: &[String]) -> String {
    let n = errors.len();
    let mut out = format!(
        "PseudoFlow {name:?} is invalid ({n} problem{}):",
        if n == 1 { "" } else { "s" }
    );
    for e in errors.iter().take(MAX_LISTED) {
        out.push_str("\n  ");
        out.push_str(e);
    }
    if n > MAX_LISTED {
        out.push_str(&format!("\n  ... and {} more", n - MAX_LISTED));
    }
    out
}

#[cfg(test)]
mod tests;
