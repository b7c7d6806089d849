//! `pseudoflow-step`, the PseudoFlow step executor: one process performs one DAG node's work
//! (run a step, evaluate a condition, list nodes, fetch an include) with the pod's
//! ServiceAccount and reports a [`StepResult`]. It knows nothing about DAGs; the controller
//! decides what runs when.

#![warn(missing_docs)]

pub mod api;
pub mod body;
pub mod compare;
pub mod context;
pub mod error;
pub mod fsops;
pub mod hostroot;
pub mod http;
pub mod journal;
pub mod kind;
pub mod node_users;
pub mod output;
pub mod process;
pub mod readiness;
pub mod segment;
pub mod steps;
pub mod tasks;
pub mod watch;

use std::time::Duration;

use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::protocol::{ExecutorInput, Task};
use pseudoflow_crd::Step;

pub use context::ExecCtx;

pub use error::StepError;

/// Refuses an input document that is not the one the Job was made for: its SHA-256 must be the
/// one the Job's spec carries (`expected`, from [`INPUT_DIGEST_ENV`]). Input Secrets have
/// predictable names; whoever could plant or change one must not choose what a (possibly
/// privileged) step pod does. Without an expected digest (a local run) nothing is checked.
///
/// [`INPUT_DIGEST_ENV`]: pseudoflow_crd::protocol::INPUT_DIGEST_ENV
pub fn check_input_digest(text: &str, expected: Option<&str>) -> Result<(), ForeignInput> {
    let Some(expected) = expected.filter(|e| !e.is_empty()) else {
        return Ok(());
    };
    let actual = pseudoflow_crd::protocol::content_digest(text.as_bytes());
    if actual == expected {
        Ok(())
    } else {
        Err(ForeignInput {
            actual,
            expected: expected.to_string(),
        })
    }
}

/// An input document other than the one the Job was made for (planted or changed).
#[derive(Debug, thiserror::Error)]
#[error(
    "the input document is not the one this Job was made for (SHA-256 {actual}, the Job expects \
     {expected}): refusing to run it"
)]
pub struct ForeignInput {
    /// The digest of the document found.
    pub actual: String,
    /// The digest the Job's spec carries.
    pub expected: String,
}

/// Parses the input document and its step; any problem is bad input (exit code 2).
pub fn parse_input(text: &str) -> Result<(ExecutorInput, Step), StepError> {
    let input: ExecutorInput =
        serde_json::from_str(text).map_err(|e| StepError::input(format!("input document: {e}")))?;
    let step: Step = serde_json::from_value(input.step.clone())
        .map_err(|e| StepError::input(format!("{}: step: {e}", input.path)))?;
    Ok((input, step))
}

/// The timeout the executor enforces: the input's, else the step type's default for its work
/// (`waitFor`'s), else none (the Job's deadline still applies).
pub fn timeout_of(input: &ExecutorInput, step: &Step) -> Option<u32> {
    input.timeout_seconds.or_else(|| {
        (input.task == Task::Run)
            .then(|| step.kind.params().default_timeout_seconds())
            .flatten()
    })
}

/// Performs the input's task within its timeout. Bad input is an `Err`; a step failure or a
/// timeout is an `Ok` result with `ok: false`.
pub async fn execute(ctx: &ExecCtx, step: &Step) -> Result<StepResult, StepError> {
    let work = async {
        match ctx.input.task {
            Task::Run => steps::run(ctx, step).await,
            Task::Condition => tasks::condition::run(ctx, step).await,
            Task::ListNodes => tasks::list_nodes::run(ctx, step).await,
            Task::FetchInclude => tasks::include::run(ctx, step).await,
        }
    };
    let outcome = match timeout_of(&ctx.input, step) {
        None => work.await,
        Some(secs) => match tokio::time::timeout(Duration::from_secs(secs.into()), work).await {
            Ok(r) => r,
            Err(_) => {
                let (goal, seen) = (ctx.goal(), ctx.last_seen());
                let mut msg = format!("timed out after {secs}s");
                if !goal.is_empty() {
                    msg.push_str(&format!(" waiting for {goal}"));
                }
                if !seen.is_empty() {
                    msg.push_str(&format!("; last seen: {seen}"));
                }
                return Ok(StepResult::failed(msg));
            }
        },
    };
    match outcome {
        Ok(r) => Ok(r),
        Err(StepError::Failed(m)) => Ok(StepResult::failed(m)),
        Err(e @ StepError::Input(_)) => Err(e),
    }
}

#[cfg(test)]
mod input_digest_tests {
    use super::check_input_digest;
    use pseudoflow_crd::protocol::content_digest;

    #[test]
    fn an_input_is_accepted_only_with_the_digest_its_job_carries() {
        let doc = r#"{"step": {"type": "log"}}"#;
        assert!(check_input_digest(doc, Some(&content_digest(doc.as_bytes()))).is_ok());
        let planted = r#"{"step": {"type": "configFile"}}"#;
        let err = check_input_digest(planted, Some(&content_digest(doc.as_bytes()))).unwrap_err();
        assert!(
            err.to_string()
                .contains("not the one this Job was made for"),
            "{err}"
        );
        assert!(
            check_input_digest(planted, None).is_ok(),
            "local runs check nothing"
        );
    }
}
