//! Telling what an `include` source holds. Shared by the executor and the controller, so it
//! lives in [`pseudoflow_crd::protocol::included`]; this path stays for the controller's imports.

pub use pseudoflow_crd::protocol::included::{classify, Classified};
