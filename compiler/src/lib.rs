//! The PseudoFlow compiler: validates a flow, reporting every problem with its path, and lowers
//! it into a DAG ([`plan::Plan`]) whose nodes become executor Jobs, each with its input in a
//! Secret ([`lower::lower`]). Pure and deterministic — no I/O — so the controller can recompile on
//! every reconcile and get the same node ids and Job names.
#![warn(missing_docs)]

pub mod compile;
pub mod dag;
pub mod emit;
pub mod expr;
pub mod flow_set;
pub mod fuse;
pub mod limits;
pub mod lower;
pub mod names;
pub mod placement;
pub mod plan;
pub mod pod_settings;
pub mod record;
pub mod render;
pub mod source;

pub use compile::{compile, compile_expanded, compile_with, validate_included, Compiled, FlowId};
pub use dag::Expansions;
pub use expr::{prepare_payload, Engine, Scope};
pub use lower::{lower, FlowRef, LowerOptions, Lowered, NodeInstance};
pub use names::{job_name, run_id};
pub use plan::{EdgeKind, NodeKind, Plan, PlanNode};
