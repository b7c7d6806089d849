//! A flow's life around its runs, end to end on testenv, and what a person sees of it: runs to
//! Succeeded, InvalidSpec and a restarted controller ([`runs`]); `onDelete` and Pod Security
//! ([`on_delete`]); retry and suspend ([`retry_suspend`]); schedules ([`schedules`],
//! [`time_zone`]); a flow applied before the API server maps its new kind ([`fresh_crd`]);
//! bounded history ([`history`]); leader election ([`leader`]); status ([`status`]), Events for
//! every step ([`step_events`]), kubectl's view ([`kubectl_view`]) and the controller's metrics
//! ([`metrics`]).

use pseudoflow_test_support as common;

mod fresh_crd;
mod history;
mod kubectl_view;
mod leader;
mod metrics;
mod on_delete;
mod retry_suspend;
mod runs;
mod schedules;
mod status;
mod step_events;
mod time_zone;
