//! What one caller on the pod network may cost the webhook server: a cap on open connections,
//! a time limit for a request's headers and another for its body, a body limit sized to what
//! the API server sends, and a budget for the body bytes held in memory at once by all
//! requests together. Without them, 60 connections each trickling an 8 MiB body took the
//! controller past its memory limit (the pod is OOM-killed, and with `failurePolicy: Fail`
//! nobody can change a flow).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest AdmissionReview body read: the API server stores objects up to 1.5 MiB (etcd's
/// limit) and a review carries one twice (old and new), plus the review around them.
pub const MAX_BODY_BYTES: usize = (3 << 20) + (64 << 10);

/// Bodies held in memory at once, all requests together. A body is counted as its bytes
/// arrive, so slow callers hold little of it; past it a request is answered 503 at once.
pub const BODY_BUDGET_BYTES: usize = 48 << 20;

/// Connections open at once (TLS handshakes included); one more is closed at once.
pub const MAX_CONNECTIONS: usize = 512;

/// Time to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Time from a connection's first byte of a request (or its start, or the end of the last
/// response: an idle connection is closed after it too) to the end of the request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Time to receive a whole body once its headers are in. The API server sends a review at once
/// and waits at most 30 s for the answer (the chart's `timeoutSeconds` is 10).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest buffer hyper keeps for one connection's reads (its headers must fit).
pub const MAX_READ_BUFFER: usize = 64 << 10;

/// The body-bytes budget shared by every request of one server.
#[derive(Debug, Clone)]
pub struct Budget(Arc<Semaphore>);

impl Budget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Budget {
        Budget(Arc::new(Semaphore::new(bytes)))
    }

    /// Bytes not held by any request now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(BODY_BUDGET_BYTES)
    }
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    /// Larger than [`MAX_BODY_BYTES`] (declared or received).
    #[error("the request body is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    /// Not all of it arrived within [`BODY_TIMEOUT`].
    #[error("the request body did not arrive within {BODY_TIMEOUT:?}")]
    TooSlow,
    /// The server holds [`BODY_BUDGET_BYTES`] of bodies already.
    #[error("the webhook is reading too many request bodies at once; try again")]
    Busy,
    /// The connection failed while reading.
    #[error("reading the request body: {0}")]
    Read(String),
}

impl IntoResponse for BodyError {
    fn into_response(self) -> Response {
        let code = match self {
            BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::TooSlow => StatusCode::REQUEST_TIMEOUT,
            BodyError::Busy => StatusCode::SERVICE_UNAVAILABLE,
            BodyError::Read(_) => StatusCode::BAD_REQUEST,
        };
        // Close the connection: a caller that sent too much or too slowly gets no second try
        // on it.
        (code, [(header::CONNECTION, "close")], self.to_string()).into_response()
    }
}

/// Reads `body` whole within `timeout`, at most `limit` bytes, each chunk counted against
/// `budget` as it arrives; the bytes and what they hold of the budget.
pub async fn read_body(
    body: Body,
    budget: &Budget,
    limit: usize,
    timeout: Duration,
) -> Result<(Vec<u8>, Option<OwnedSemaphorePermit>), BodyError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut held: Option<OwnedSemaphorePermit> = None;
    loop {
        let chunk = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return Err(BodyError::TooSlow),
            Ok(None) => return Ok((bytes, held)),
            Ok(Some(Err(e))) => return Err(BodyError::Read(e.to_string())),
            Ok(Some(Ok(chunk))) => chunk,
        };
        if bytes.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        let n = u32::try_from(chunk.len()).map_err(|_| BodyError::TooLarge)?;
        let permit = budget
            .0
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| BodyError::Busy)?;
        match &mut held {
            Some(h) => h.merge(permit),
            None => held = Some(permit),
        }
        bytes.extend_from_slice(&chunk);
    }
}

/// Middleware for the admission routes: refuses a body declared too large at once, reads the
/// body under [`read_body`]'s bounds, and holds its share of the budget until the answer is
/// made (parsing and answering it take memory in proportion).
pub async fn bounded_body(State(budget): State<Budget>, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return BodyError::TooLarge.into_response();
    }
    let (parts, body) = req.into_parts();
    match read_body(body, &budget, MAX_BODY_BYTES, BODY_TIMEOUT).await {
        Ok((bytes, held)) => {
            let response = next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
            drop(held);
            response
        }
        Err(e) => {
            tracing::debug!("webhook request refused: {e}");
            e.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: Vec<Vec<u8>>) -> Body {
        let stream = futures::stream::iter(parts.into_iter().map(Ok::<_, std::io::Error>));
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn a_body_is_read_whole_and_holds_its_bytes_of_the_budget_until_dropped() {
        let budget = Budget::new(100);
        let body = chunks(vec![vec![1; 30], vec![2; 20]]);
        let (bytes, held) = read_body(body, &budget, 80, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(bytes.len(), 50);
        assert_eq!(budget.available(), 50);
        drop(held);
        assert_eq!(budget.available(), 100);
    }

    #[tokio::test]
    async fn too_large_too_slow_or_over_the_budget_is_refused_and_the_budget_given_back() {
        let budget = Budget::new(100);
        let body = chunks(vec![vec![0; 50], vec![0; 50]]);
        let err = read_body(body, &budget, 80, Duration::from_secs(1)).await;
        assert_eq!(err.unwrap_err(), BodyError::TooLarge);
        assert_eq!(budget.available(), 100);
        let (_, held) = read_body(
            chunks(vec![vec![0; 70]]),
            &budget,
            80,
            Duration::from_secs(1),
        )
        .await
        .unwrap();
        let err = read_body(
            chunks(vec![vec![0; 40]]),
            &budget,
            80,
            Duration::from_secs(1),
        )
        .await;
        assert_eq!(err.unwrap_err(), BodyError::Busy);
        drop(held);
        let never =
            Body::from_stream(futures::stream::pending::<Result<Vec<u8>, std::io::Error>>());
        let err = read_body(never, &budget, 80, Duration::from_millis(50)).await;
        assert_eq!(err.unwrap_err(), BodyError::TooSlow);
        assert_eq!(budget.available(), 100);
    }
}
