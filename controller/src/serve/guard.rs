//! A panic while reconciling one flow must not end the controller's loop (which would leave every
//! flow unserved): each reconcile runs under [`catching`], and the flow that panicked is marked
//! Failed with reason `InternalError` ([`crate::flow::outcome::refuse`]).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

/// A reconcile panicked; what the panic said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("internal error: {0}")]
pub struct Panicked(pub String);

/// Runs `fut`, turning a panic inside it into `Err(Panicked)`. Asserting unwind safety is sound
/// here: the panicked future is dropped, never polled again, and what it shares (the client,
/// the metrics' locks, which are held for no more than a map update) stays consistent.
pub async fn catching<T>(fut: impl Future<Output = T>) -> Result<T, Panicked> {
    AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .map_err(|payload| Panicked(message(payload.as_ref())))
}

/// The text of a panic's payload (`panic!` with a message gives a `&str` or a `String`).
fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_future_becomes_an_error_with_its_message() {
        let r = catching(async {
            let limit: u32 = std::hint::black_box(u32::MAX);
            if limit > 0 {
                panic!("attempt to add with overflow");
            }
            1
        })
        .await;
        assert_eq!(r, Err(Panicked("attempt to add with overflow".into())));
        let formatted = catching(async { panic!("at {}", "spec.steps[0]") }).await;
        assert_eq!(formatted, Err::<(), _>(Panicked("at spec.steps[0]".into())));
        let opaque = catching(async { std::panic::panic_any(7u8) }).await;
        assert_eq!(
            opaque,
            Err::<(), _>(Panicked("a panic without a message".into()))
        );
    }

    #[tokio::test]
    async fn a_future_that_does_not_panic_gives_its_output() {
        assert_eq!(catching(async { 42 }).await, Ok(42));
    }

    #[tokio::test]
    async fn the_caller_goes_on_after_a_panic() {
        let mut served = Vec::new();
        for flow in ["a", "panics", "c"] {
            let r = catching(async move {
                assert_ne!(flow, "panics", "reconcile of {flow}");
                flow
            })
            .await;
            served.push(r.map_err(|p| p.0.contains("reconcile of panics")));
        }
        assert_eq!(served, [Ok("a"), Err(true), Ok("c")]);
    }
}
