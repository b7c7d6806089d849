//! End to end for seed features that would otherwise be only unit-tested or untested:
//! `template` into a node file and into a variable, `patchFile` `createIfMissing`, `execNode`
//! `runOn: any|first` and `varPerNode`, `deleteFile` on a node ([`node_steps`]);
//! `spec.artifacts` in its url form ([`artifacts_url`]); `status.lastRunTime` and the
//! `status.steps` cap with `stepsOmitted` ([`status`]); removing NodeLocal DNS after installing
//! it, seed §13.2 ([`nodelocaldns`]).

mod common;

#[path = "seed_coverage/artifacts_url.rs"]
mod artifacts_url;
#[path = "seed_coverage/node_steps.rs"]
mod node_steps;
#[path = "seed_coverage/nodelocaldns.rs"]
mod nodelocaldns;
#[path = "seed_coverage/status.rs"]
mod status;
