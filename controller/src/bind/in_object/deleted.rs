//! A deleted object of a flow recorded in its objects that has `onDelete` steps: the flow put
//! its finalizer on the object when it served it (as a kopf operator puts its own), so the
//! object waits while the `onDelete` steps run here, in memory, with the same runner and rules
//! as its steps (`${trigger}` is `{event: delete}`); once they succeed, only our finalizer comes
//! off. A failure is written into the object's status (naming the failed `spec.onDelete[i]`
//! step and the next attempt) and tried again with the flow's `bind.retry` backoff; the object
//! stays until a run succeeds, or the flow lets it go ([`super::release`]).
//!
//! The backoff of a deleted object is kept in this process's memory only (the object's served
//! mark keeps its main run's): a restarted controller tries a deleted object again at once.

use kube::api::DynamicObject;
use pseudoflow_crd::FlowPhase;
use serde_json::{json, Value};

use super::{retry, retry_now, Serving};
use crate::bind::object;
use crate::bind::rollout::With;
use crate::bind::served;
use crate::bind::{NotServed, Served};
use crate::flow::finalizer;

/// Whether the bound flow's spec (as written) has `onDelete` steps, so that it holds a finalizer
/// on each object it serves.
pub fn has_on_delete(spec: &Value) -> bool {
    spec["onDelete"].as_array().is_some_and(|s| !s.is_empty())
}

/// What a deleted object's `onDelete` run sees as `${trigger}`.
fn delete_trigger() -> Value {
    json!({"event": "delete", "changed": []})
}

impl Serving<'_> {
    /// Serves `obj`, deleted while it carries our finalizer `fin`: runs its `onDelete` steps when
    /// due (at once, or when the backoff of its last failure has passed), then removes `fin`;
    /// returns why it cannot be served (the flow does not compile).
    pub async fn serve_deleted(&self, obj: &DynamicObject, fin: &str) -> Served {
        let name = object::key(obj);
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        let outcomes = &self.r.own.outcomes;
        let known = outcomes.scheduled(self.parent.uid, &name);
        let known = known.filter(|s| s.uid == uid && s.trigger["event"] == "delete");
        if known.as_ref().is_some_and(|k| retry_now() < k.due) {
            return Ok(None);
        }
        let finalizer = fin.to_string();
        // The onDelete steps of the revision that serves it (a rollout's: bind/rollout).
        let key = served::mark_key(self.parent.namespace, self.parent.name);
        let annotations = obj.metadata.annotations.as_ref();
        let raw = annotations.and_then(|a| a.get(&key));
        let mark = raw.and_then(|raw| self.sealer().open(raw, uid));
        let with = self.with(&name, mark.as_ref().and_then(|m| m.revision.as_deref()));
        let work = super::tasks::Work::Deleted { finalizer, with };
        self.start(obj, work).await
    }

    /// Runs the `onDelete` steps of `obj` (deleted, holding our finalizer `fin`) to their end:
    /// removes `fin` when they succeed, records the failure and its retry otherwise.
    pub(super) async fn run_deleted(&self, obj: &DynamicObject, fin: &str, with: &With) -> Served {
        let name = object::key(obj);
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        let outcomes = &self.r.own.outcomes;
        let known = outcomes.scheduled(self.parent.uid, &name);
        let known = known.filter(|s| s.uid == uid && s.trigger["event"] == "delete");
        let failures = known.map_or(0, |k| k.failures);
        let view = object::run_view(&object::view(obj), obj);
        let trigger = delete_trigger();
        let spec = with.spec.as_deref().unwrap_or(self.parent.spec);
        let (made, compiled) = match self.compiled_with(spec, &view, &trigger) {
            Ok(c) => c,
            Err(d) => {
                return Ok(Some(NotServed(format!(
                    "{name}: the flow does not compile: {d}"
                ))))
            }
        };
        let Some(plan) = compiled.on_delete.clone() else {
            // No onDelete steps (any more): nothing holds the object.
            return self.let_go(obj, fin).await;
        };
        // The onDelete plan, run as the main one is: the same runner, deadline and account.
        let on_delete = pseudoflow_compiler::Compiled {
            plan,
            on_delete: None,
            ..compiled
        };
        let keeper = self.keeper(obj, &self.deleted_work(with));
        let ran = self.run(
            &on_delete,
            &made["spec"],
            (view, trigger.clone()),
            (obj, &keeper),
        );
        let (phase, message, vars) = match ran.await {
            Ok((ran, _)) => self.ended(&on_delete, &ran),
            Err(why) => return Ok(Some(NotServed(format!("{name}: {why}")))),
        };
        if phase == FlowPhase::Succeeded {
            return self.let_go(obj, fin).await;
        }
        // The next attempt is a run of its own, from the first onDelete step.
        keeper.remove().await;
        // Every failure is tried again (the object stays until its onDelete succeeds, or the
        // flow lets it go): even one that cannot be rendered, which a fixed flow mends.
        let failures = failures.saturating_add(1);
        let ended_at = retry_now();
        let policy = self.bind.retry.unwrap_or_default();
        let next = retry::told(&policy, failures, false, ended_at);
        let message = message.map(|m| format!("{m}; {next}"));
        self.tell(obj, message.as_deref(), false).await;
        self.outcome(&name, message.clone(), None, Some(with.hash.clone()));
        let due = retry::due(&policy, failures, ended_at);
        let s = self.schedule(obj, failures, due, Some(trigger), "");
        outcomes.schedule(self.parent.uid, &name, Some(s));
        self.write_status(obj, &on_delete, phase, message, &vars)
            .await?;
        Ok(None)
    }

    /// Removes our finalizer `fin` from `obj` (gone meanwhile: done) and forgets it. The removal
    /// names the resourceVersion it read, so no other finalizer is lost; the run itself may have
    /// written the object since (its progress record), so a conflict reads it again.
    async fn let_go(&self, obj: &DynamicObject, fin: &str) -> Served {
        let mut read = std::borrow::Cow::Borrowed(obj);
        let name = obj.metadata.name.as_deref().unwrap_or_default();
        for left in (0..3).rev() {
            match finalizer::set_named(&self.objects, &read, fin, false).await {
                Ok(()) => break,
                Err(kube::Error::Api(e)) if e.code == 404 => break,
                Err(kube::Error::Api(e)) if e.code == 409 && left > 0 => {
                    match self.objects.get_opt(name).await? {
                        Some(now) => read = std::borrow::Cow::Owned(now),
                        None => break,
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        let outcomes = &self.r.own.outcomes;
        outcomes.record(self.parent.uid, object::key(obj), None);
        Ok(None)
    }
}
