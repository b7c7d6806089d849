//! Rolling a bound flow's new revision out to its objects (issue #44, docs/bound-flows.md#rollouts):
//! in waves, stopping on failures, with pause, resume, promote and undo asked for by a person.

pub mod control;
