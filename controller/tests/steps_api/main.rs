//! The API-level step types end to end on testenv, as users run them: in executor Jobs
//! ([`in_jobs`]) and in the controller ([`in_controller`]); `${...}` in YAML bodies read at run
//! time ([`yaml_bodies`]); `copy` of a Secret's keys ([`copy`]); `exec` in a named pod
//! ([`exec_in_pod`]); `spec.artifacts` from a URL ([`artifacts_url`]); an API-context
//! `script` ([`script`]); and `apply` to the status subresource ([`status_apply`]).

use pseudoflow_test_support as common;

mod artifacts_url;
mod copy;
mod exec_in_pod;
mod in_controller;
mod in_jobs;
mod script;
mod status_apply;
mod yaml_bodies;
