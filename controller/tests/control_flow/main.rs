//! How a flow's steps are walked, end to end on testenv: `retry` ([`retry`]), `parallel`
//! ([`parallel`]), `if`/`when`/`loop` ([`branches_and_loops`]) and their comparisons
//! ([`conditions`]), `continueOnError`/`onError` ([`errors`]), the controller-local steps
//! ([`local_steps`]), step timeouts ([`timeouts`]) and those of structural steps
//! ([`structural_timeouts`]), concurrency policies ([`concurrency`]), `include` and
//! `includeFlow` ([`includes`], [`include_library`]) and step fusion ([`fusion`]). The walker's
//! unit tests (walk/src/tests.rs) cover the same rules on a pure plan; these check what a person
//! sees on the cluster: status, Jobs, created objects and Events.

use pseudoflow_test_support as common;

mod branches_and_loops;
mod concurrency;
mod conditions;
mod errors;
mod fusion;
mod include_library;
mod includes;
mod local_steps;
mod parallel;
mod retry;
mod structural_timeouts;
mod timeouts;
