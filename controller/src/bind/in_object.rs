//! A bound flow recorded in its objects (`bind.record: Object`,
//! docs/decisions.md#bound-flows-recorded-in-the-object): no child flow and no run-state
//! Secret per object. Each serve reads the object's served mark ([`super::served`]), and when
//! something that counts changed, runs the object's steps in memory, to their end
//! ([`run`]), then writes the object's status (as [`super::write_back`] does for a child) and
//! only then the new mark: a controller killed between the two runs the object again, which
//! only repeatable steps allow (the compiler refuses any other: `pseudoflow_compiler::record`).
//! Every call is made as the flow's ServiceAccount.

pub mod outcomes;
pub mod run;

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use pseudoflow_compiler::compile::{compile, FlowId};
use pseudoflow_compiler::lower::FlowRef;
use pseudoflow_crd::bind::Bind;
use pseudoflow_crd::FlowPhase;
use pseudoflow_walk::{RunPhase, StoredRun};
use serde_json::{json, Value};

use super::child::{self, Parent};
use super::served::{self, Mark};
use super::write_back::{object_status, rendered_fields, with_times};
use super::{object, Binder};
use crate::flow::events::EventType;
use crate::flow::status::failure_message;
use crate::flow::{Error, Reconciling};

/// One bound flow serving one object in the object.
pub(crate) struct Serving<'a> {
    /// The bound flow's reconcile.
    pub r: &'a Reconciling<'a, Binder>,
    /// Its binding.
    pub bind: &'a Bind,
    /// Who it is (as a child is made for it).
    pub parent: Parent<'a>,
    /// The kind's plural.
    pub plural: &'a str,
    /// The objects' API in the object's namespace, as the flow's ServiceAccount.
    pub objects: Api<DynamicObject>,
}

impl Serving<'_> {
    /// Serves `obj`: runs it if it changed since its mark; returns why it cannot be served.
    pub async fn serve(&self, obj: &DynamicObject) -> Result<Option<String>, Error> {
        let view = object::view(obj);
        let key = served::mark_key(self.parent.namespace, self.parent.name);
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        let annotations = obj.metadata.annotations.as_ref();
        let mark = annotations
            .and_then(|a| a.get(&key))
            .and_then(|raw| Mark::decode(raw, uid));
        let flow = (self.parent.uid, self.parent.generation);
        let name = object::key(obj);
        let Some(trigger) = served::trigger(mark.as_ref(), flow, &view, self.bind) else {
            // Unchanged: what its last serve saw counts, known here or told by its mark.
            let failed = mark.is_some_and(|m| m.failed);
            let failure = failed.then(|| "its last run failed (see its status)".to_string());
            self.outcome(&name, failure, false);
            return Ok(None);
        };
        if self.parent.spec["suspend"] == Value::Bool(true) {
            // No new run while suspended (a child's would hold); unmarked, the object is
            // served once the flow is resumed.
            return Ok(None);
        }
        let made = child::child_flow(
            &self.parent,
            self.parent.name,
            self.plural,
            &view,
            &trigger,
            &BTreeMap::new(),
        );
        let id = FlowId {
            name: self.parent.name,
            namespace: Some(self.parent.namespace),
        };
        let compiled = match compile(&id, &made["spec"]) {
            Ok(c) => c,
            Err(d) => return Ok(Some(format!("{name}: the flow does not compile: {d}"))),
        };
        let ran = self.run(&compiled, &made["spec"], view.clone(), trigger);
        let (phase, message, vars) = match ran.await {
            Ok(ran) => self.ended(&compiled, &ran, &name).await,
            Err(why) => return Ok(Some(format!("{name}: {why}"))),
        };
        self.outcome(&name, message.clone(), true);
        // Not written: an error, so the object is tried again soon (not a refusal, which
        // waits for the next full pass, five minutes on).
        self.write_status(obj, &compiled, phase, message, &vars)
            .await?;
        let mut mark = Mark::of(flow.0, flow.1, &view, self.bind);
        mark.failed = phase != FlowPhase::Succeeded;
        self.mark(obj, &key, mark).await
    }

    /// The object's run, to its end, as the flow's ServiceAccount (Err: no client for it).
    async fn run(
        &self,
        compiled: &pseudoflow_compiler::Compiled,
        spec: &Value,
        object: Value,
        trigger: Value,
    ) -> Result<StoredRun, String> {
        let sa = compiled.spec.service_account_name.as_deref();
        let sa = sa.unwrap_or("default").to_string();
        let ns = self.parent.namespace;
        let client = self.r.ctx.accounts.client_as(ns, &sa)?;
        let runner = run::Runner {
            engine: &self.r.ctx.engine,
            steps: &self.r.own.in_controller,
            flow: FlowRef {
                name: self.parent.name.to_string(),
                namespace: ns.to_string(),
                uid: self.parent.uid.to_string(),
                service_account: sa,
            },
            client,
            object,
            trigger,
            metrics: &self.r.ctx.metrics,
        };
        let run_id = format!("o{}", &crate::secret::random_hex()[..10]);
        Ok(runner.run(compiled, spec, &run_id).await)
    }

    /// Writes the object's status for the run's end (as [`super::write_back`] does for a
    /// child's run); an error if it could not be written (told as `StatusWriteFailed`).
    async fn write_status(
        &self,
        obj: &DynamicObject,
        compiled: &pseudoflow_compiler::Compiled,
        phase: FlowPhase,
        message: Option<String>,
        vars: &BTreeMap<String, Value>,
    ) -> Result<(), Error> {
        let spec = &compiled.spec;
        let Some(bound) = spec.bound.as_ref().filter(|b| b.status.writes_anything()) else {
            return Ok(());
        };
        let ok = phase == FlowPhase::Succeeded;
        let fields = rendered_fields(self.r, spec, bound, ok, vars);
        let status = object_status(bound, Some(phase), message.as_deref(), fields);
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let patch = json!({"status": with_times(status, &now)});
        let pp = PatchParams::default();
        let oname = obj.metadata.name.as_deref().unwrap_or_default();
        let patch = Patch::Merge(&patch);
        let Err(e) = self.objects.patch_status(oname, &pp, &patch).await else {
            return Ok(());
        };
        let why = format!("{}: writing its status: {e}", object::key(obj));
        self.r
            .publish(EventType::Warning, "StatusWriteFailed", &why)
            .await;
        Err(e.into())
    }

    /// The run's phase and failure (naming the failed step's path), told as an Event naming
    /// the object and counted.
    async fn ended(
        &self,
        compiled: &pseudoflow_compiler::Compiled,
        ran: &StoredRun,
        name: &str,
    ) -> (FlowPhase, Option<String>, BTreeMap<String, Value>) {
        let r = self.r;
        let vars = ran.vars.clone();
        if ran.state.phase == RunPhase::Succeeded {
            r.ctx.metrics.run_finished(&r.key(), "Succeeded");
            let note = format!("{name}: served");
            r.publish(EventType::Normal, "ObjectServed", &note).await;
            return (FlowPhase::Succeeded, None, vars);
        }
        r.ctx.metrics.run_finished(&r.key(), "Failed");
        let failure = ran.state.failure.as_ref();
        let message = failure
            .map(|f| failure_message(&compiled.plan, f))
            .unwrap_or_else(|| "the run did not end".into());
        let note = format!("{name}: {message}");
        r.publish(EventType::Warning, "ObjectFailed", &note).await;
        (FlowPhase::Failed, Some(message), vars)
    }

    /// Records what the serve of object `name` saw, for the summary: a run's end always, an
    /// unchanged object's mark only where nothing is known yet (after a restart).
    fn outcome(&self, name: &str, failure: Option<String>, ran: bool) {
        let at = k8s_openapi::jiff::Timestamp::now().as_second();
        let o = outcomes::Outcome { failure, at };
        let outcomes = &self.r.own.outcomes;
        if ran {
            outcomes.record(self.parent.uid, name.to_string(), Some(o));
        } else {
            outcomes.record_if_unknown(self.parent.uid, name, o);
        }
    }

    /// Writes the object's served mark (after its status: see the module's doc).
    async fn mark(
        &self,
        obj: &DynamicObject,
        key: &str,
        mark: Mark,
    ) -> Result<Option<String>, Error> {
        let patch = json!({"metadata": {"annotations": {key: Value::String(mark.encode())}}});
        let oname = obj.metadata.name.as_deref().unwrap_or_default();
        let pp = PatchParams::default();
        match self.objects.patch(oname, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => Ok(None),
            // Deleted meanwhile: nothing left to serve.
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
