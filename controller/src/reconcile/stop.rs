//! `ops.example.com/stop` (what `kubectl pf stop` sets): its value names a run to end now. The
//! run's running Jobs are deleted (steps the controller runs itself are cancelled), no further
//! step starts — no `onError` step either — and the run reads `Aborted` (reason `Aborted`,
//! Ready False). The value is a run id, so it is dealt with once: a run that already ended, or a
//! later run, is not touched by it. The `onDelete` run of a flow being deleted is not stopped
//! this way (the flow is let go only once it succeeded). Who asked is the admission webhook's
//! stamp (`ops.example.com/stopped-by`, `crate::stopped_by`), named in the message.

use kube::ResourceExt;
use pseudoflow_crd::STOP_ANNOTATION;
use pseudoflow_walk::{RunPhase, StoredRun};

use super::Reconcile;

/// The message a stopped run's status and `RunAborted` Event carry: who stopped it, as the
/// admission webhook's stamp records (`crate::stopped_by`), or that nobody recorded who.
pub fn message(r: &Reconcile<'_>, run: &StoredRun) -> String {
    let annotations = r.flow.annotations();
    let at = (r.ns(), r.flow_id.name, run.run_id.as_str());
    let by = match crate::stopped_by::who(r.own.approval_key.as_ref(), annotations, at) {
        Some(stamp) => format!("by {}", stamp.user),
        None => "by a user nobody recorded (no admission webhook stamped it)".to_string(),
    };
    format!("stopped {by}: {STOP_ANNOTATION} named this run; its running steps were stopped")
}

/// Whether the flow asks for `run`, still running, to stop now.
pub fn requested(r: &Reconcile<'_>, run: &StoredRun, deleting: bool) -> bool {
    !deleting
        && run.state.phase == RunPhase::Running
        && r.flow.annotations().get(STOP_ANNOTATION) == Some(&run.run_id)
}
