//! Upper bounds on what a flow may ask for. Every duration and count has a maximum, so no
//! arithmetic on them can overflow and no flow can make the controller wait for decades, and
//! values and step lists have a bounded depth, so nothing that reads a flow recurses without
//! bound. The CRD carries the numeric maxima (the API server refuses a flow that exceeds them);
//! the validator checks them all again for flows that never went through the API server
//! (`pseudoflow-compile`, included steps).

/// Longest duration any `...Seconds` field accepts (a step's or the run's timeout): 7 days.
/// Longer operations belong in a CronJob, not in one run.
pub const MAX_DURATION_SECONDS: u32 = 7 * 24 * 3600;

/// Longest `waitFor.intervalSeconds`: it only bounds how long a silent watch is trusted.
pub const MAX_INTERVAL_SECONDS: u32 = 3600;

/// Largest `loop.maxParallel`: a loop never has more items than this in flight.
pub const MAX_LOOP_PARALLEL: u32 = 1_000;

/// Largest `loopNodes.maxParallel`: the largest cluster Kubernetes supports.
pub const MAX_NODE_PARALLEL: u32 = 5_000;

/// Deepest a value may be nested below the step that holds it (`spec.steps[0].forEach[0][0]...`
/// counts `forEach` as 1), or below `spec` outside steps. Kubernetes objects in `manifests` stay
/// well below it; the bound keeps the whole object inside serde_json's recursion limit (128)
/// together with [`MAX_STEP_DEPTH`].
pub const MAX_VALUE_DEPTH: usize = 32;

/// Deepest steps may be nested (a top-level step is at depth 1; its `then` steps at 2), also
/// across included steps.
pub const MAX_STEP_DEPTH: usize = 16;

/// At most this many diagnostics about depth: one deep flow should not produce thousands.
pub const MAX_DEPTH_REPORTS: usize = 10;

/// Most steps one flow may have, counting nested steps and the steps includes bring at run
/// time: bounds the plan the controller keeps in memory for each flow (about 3.6 KiB a step).
pub const MAX_STEPS: usize = 10_000;

/// Most items one `loop` may run (a literal `forEach` or what its expression produces).
pub const MAX_LOOP_ITEMS: usize = 1_000;

/// Most nodes one `loopNodes` (or a node step's fan-out) may run on: the largest cluster
/// Kubernetes supports.
pub const MAX_LOOP_NODES: usize = 5_000;

/// Most loop iterations (items and nodes, over every loop, nested ones multiplied) one run may
/// start: bounds the run state and the Jobs a run creates.
pub const MAX_RUN_ITERATIONS: usize = 10_000;
