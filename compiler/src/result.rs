//! The executor's report about one node instance. The type is part of the executor contract, so
//! it lives in [`pseudoflow_crd::protocol`]; this path stays for the controller's imports.

pub use pseudoflow_crd::protocol::result::{
    IncludedDocument, StepResult, TERMINATION_MESSAGE_LIMIT,
};
