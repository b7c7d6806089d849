//! The controller's bounds, in one place: what one flow may cost it before that flow fails alone
//! (rather than stalling, or starving every other flow). The bounds the pure run-time checks
//! (spec depth, plan growth, include nesting, step instances) are defined in `pseudoflow_walk`.

pub use pseudoflow_walk::limits::{
    bounded, MAX_INCLUDE_DEPTH, MAX_INSTANCES, MAX_INSTANCE_MESSAGE_CHARS, MAX_PLAN_NODES,
    MAX_SPEC_DEPTH,
};

/// Deepest JSON nesting of a stored run state (variables and fetched steps included), so that
/// it always reads back (serde_json's limit is 128).
pub const MAX_RUN_STATE_DEPTH: usize = 100;

/// Largest serialized run state (walker state, variables, fetched includes) stored for a flow.
/// The API server stores at most 1 MiB per object; this leaves room for the object around it.
pub const MAX_RUN_STATE_BYTES: usize = 900 * 1024;

/// Largest flow spec the controller reads, in bytes of JSON (docs/decisions.md#largest-flow-the-controller-reads-512-kib-of-spec).
/// A flow over it is refused (Failed, naming the limit) and its spec is dropped as its watch
/// decodes it, so the watch's store never holds it: otherwise anyone who may create flows
/// makes the controller hold what they write (100 flows of 1.2 MB kept it +242 MiB). Real
/// flows are a few tens of KB; a bound flow's child carries its object (at most
/// [`crate::bind::decode::MAX_OBJECT_BYTES`]) besides its flow's steps.
pub const MAX_FLOW_SPEC_BYTES: usize = 512 * 1024;

/// Items per LIST page of the controller's watches of what others write (flows, bound
/// objects): one page is held whole, as text, while it is decoded; at most 10 objects of the
/// API server's 1.5 MiB each.
pub const WATCH_PAGE: u32 = 10;

/// Longest `status.message` (and condition message), in characters.
pub const MAX_STATUS_MESSAGE_CHARS: usize = 2000;

/// Longest message of one `status.steps` entry, in characters.
pub const MAX_STEP_MESSAGE_CHARS: usize = 300;

/// Longest Event note, in characters (the API server refuses notes over 1 kB).
pub const MAX_EVENT_NOTE_CHARS: usize = 1000;

/// Flows reconciled at once (the others wait their turn): bounds the controller's memory when
/// many flows are created together (`make bench`, its `scale` section).
pub const MAX_CONCURRENT_RECONCILES: u16 = 16;

/// API steps the controller runs itself at once, across all flows (the others wait for a
/// turn): bounds its memory and its load on the API server (docs/decisions.md#api-steps-in-the-controller).
pub const MAX_STEPS_IN_CONTROLLER: usize = 64;

/// Of those, how many one namespace's flows may run at once (a quarter): one tenant's steps
/// leave three quarters of the turns to the others, however many flows or objects it has
/// (`turns.rs`).
pub const MAX_STEPS_IN_CONTROLLER_PER_NAMESPACE: usize = MAX_STEPS_IN_CONTROLLER / 4;

/// Of those, how many one flow may run at once (half its namespace's): a flow with a thousand
/// parallel steps, or a bound flow with a thousand objects, waits for its own turns and leaves
/// half of its namespace's to its other flows. Was 4: a bound flow's burst of objects then
/// queued on four turns where the kopf operator it replaces runs its handlers six at a time,
/// and seed 001's 100 Databases took 1.5–2× kopf's time to be served (`make bench` section 8).
pub const MAX_STEPS_IN_CONTROLLER_PER_FLOW: usize = MAX_STEPS_IN_CONTROLLER_PER_NAMESPACE / 2;

/// Steps parked on a watch in the controller at once (a `waitFor`, a `delete` waiting for its
/// object to go), across all flows; a parked step holds no turn of the above, only one of these
/// places: its memory and one watch request to the API server (the others wait for a place).
pub const MAX_WAITS_IN_CONTROLLER: usize = 512;

/// Of those, how many one namespace's steps may hold (a quarter, as for turns).
pub const MAX_WAITS_IN_CONTROLLER_PER_NAMESPACE: usize = MAX_WAITS_IN_CONTROLLER / 4;

/// Longest a step run in the controller may take when neither it nor its type sets a timeout.
pub const MAX_STEP_IN_CONTROLLER_SECONDS: u64 = 3600;

/// How long a reconcile waits for a step it started in the controller before it lets the
/// step finish on its own (its end then wakes the flow): most API steps end within it, so the
/// run goes on in the same reconcile.
pub const STEP_IN_CONTROLLER_WAIT_MS: u64 = 1000;
