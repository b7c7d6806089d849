//! The tasks besides running a step: evaluating a condition (`if`/`when`), listing the nodes a
//! selector picks (`loopNodes`, node fan-out) and fetching an `include` source.

pub mod condition;
pub mod include;
pub mod list_nodes;
