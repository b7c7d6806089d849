//! A bound flow recorded in its objects (`bind.record: Object`,
//! docs/decisions.md#bound-flows-recorded-in-the-object): no child flow and no run-state
//! Secret per object. Each serve reads the object's served mark ([`super::served`]), and when
//! something that counts changed, runs the object's steps in memory, to their end
//! ([`run`]), then writes the object's status (as [`super::write_back`] does for a child) and
//! only then the new mark: a controller killed between the two runs the object again, which
//! only repeatable steps allow (the compiler refuses any other: `pseudoflow_compiler::record`),
//! save a command in another pod, run once under the object's progress record ([`progress`]),
//! from which the next serve resumes the run.
//! A flow with `onDelete` holds a finalizer on each object it serves and runs those steps the
//! same way when the object is deleted ([`deleted`]); released, it removes them ([`release`]).
//! A change of a related object's content (`bind.related`) runs the object again, as it would
//! re-make its child ([`related`]). Every call is made as the flow's ServiceAccount.

pub mod deleted;
pub mod outcomes;
pub mod progress;
pub mod related;
pub mod release;
pub mod retry;
pub mod run;
pub mod tasks;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use pseudoflow_compiler::compile::{compile, FlowId};
use pseudoflow_compiler::lower::FlowRef;
use pseudoflow_crd::bind::Bind;
use pseudoflow_crd::FlowPhase;
use pseudoflow_walk::{RunPhase, StoredRun};
use serde_json::{json, Value};

use super::child::{self, Parent};
use super::related::RelatedSeen;
use super::rollout::{Assign, With};
use super::served::{self, Mark};
use super::write_back::{object_status, rendered_fields, with_times};
use super::{object, Binder};
use crate::bind::{NotServed, Served};
use crate::flow::events::EventType;
use crate::flow::status::failure_message;
use crate::flow::{Error, Reconciling};
use retry::Next;
use tasks::{Detached, Launch, Tasks, Work};

/// How long an object's run goes before its status says `Creating`: a run that ends sooner
/// (most do) writes its status once, at its end.
const SHOW_CREATING_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

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
    /// The rollout of the flow's revision, when it keeps revisions: which one serves the
    /// object (None: the flow's spec as it is now).
    pub assign: Option<&'a Assign>,
    /// The object's related objects as they are now (`bind.related`, read as the flow's
    /// ServiceAccount: key, resourceVersion, content digest); empty when it has none.
    pub related: &'a [(String, RelatedSeen)],
}

/// An object whose run is due: what its serve read, and what its run starts from.
struct Due<'a> {
    /// The object as its run and mark see it ([`object::view`]).
    view: Value,
    /// The annotation key of this flow's served mark, and the mark found there.
    key: String,
    raw: Option<&'a str>,
    /// `${trigger}`, and the failed runs in a row before this one.
    trigger: Value,
    failures: u32,
    /// The revision it runs with.
    with: With,
    /// Its related objects as its serve read them.
    related: Vec<(String, RelatedSeen)>,
}

impl Serving<'_> {
    /// Serves `obj`: runs it if it changed since its mark or a retry of its failed run is due
    /// ([`retry`]); returns why it cannot be served.
    pub async fn serve(&self, obj: &DynamicObject) -> Served {
        let view = object::view(obj);
        let key = served::mark_key(self.parent.namespace, self.parent.name);
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        let annotations = obj.metadata.annotations.as_ref();
        let raw = annotations.and_then(|a| a.get(&key)).map(String::as_str);
        let mark = raw.and_then(|raw| self.sealer().open(raw, uid));
        let name = object::key(obj);
        let marked = mark.as_ref().and_then(|m| m.revision.as_deref());
        let with = self.with(&name, marked);
        let changed = self.changed(mark.as_ref(), &view, &with);
        let changed = self.with_related(&name, mark.as_ref(), changed);
        let policy = self.bind.retry.unwrap_or_default();
        let outcomes = &self.r.own.outcomes;
        let known = outcomes.scheduled(self.parent.uid, &name);
        let known = known.filter(|s| s.uid == uid);
        let now = retry_now();
        let (trigger, failures) =
            match retry::next(&policy, raw, mark.as_ref(), changed, known.as_ref(), now) {
                Next::Run { trigger, failures } => (trigger, failures),
                Next::Wait(due) => {
                    if let (None, Some(m), Some(raw)) = (&known, &mark, raw) {
                        // Known from its mark alone (this process restarted): kept, so that
                        // it is served when due.
                        let s = self.schedule(obj, m.failures, due, m.retry_trigger.clone(), raw);
                        outcomes.schedule(self.parent.uid, &name, Some(s));
                    }
                    let failure = "its last run failed (see its status)".to_string();
                    let marked = mark.as_ref().and_then(|m| m.revision.clone());
                    let at = Some(mark.as_ref().map_or(0, |m| m.served_at));
                    self.outcome(&name, Some(failure), at, marked);
                    return Ok(None);
                }
                Next::Nothing => {
                    // Unchanged: what its last serve saw counts, known here or told by its mark.
                    let failed = mark.as_ref().is_some_and(|m| m.failed);
                    let failure = failed.then(|| "its last run failed (see its status)".into());
                    let marked = mark.as_ref().and_then(|m| m.revision.clone());
                    let at = Some(mark.as_ref().map_or(0, |m| m.served_at));
                    self.outcome(&name, failure, at, marked);
                    return Ok(None);
                }
            };
        if self.parent.spec["suspend"] == Value::Bool(true) {
            // No new run while suspended (a child's would hold); unmarked, the object is
            // served once the flow is resumed (its generation moved: every object runs).
            outcomes.schedule(self.parent.uid, &name, None);
            return Ok(None);
        }
        let work = Work::Steps {
            view,
            key,
            raw: raw.map(str::to_string),
            trigger,
            failures,
            with,
            related: self.related.to_vec(),
        };
        self.start(obj, work).await
    }

    /// How this flow's served marks are sealed and read: under the controller's approval key
    /// (none: unsealed), for this flow ([`served::seal`]).
    pub(super) fn sealer(&self) -> served::Sealer<'_> {
        served::Sealer {
            key: self.r.own.approval_key.as_ref(),
            flow: (self.parent.namespace, self.parent.name),
        }
    }

    /// The revision object `name` is served with, its mark naming `marked`: the rollout's
    /// choice, or the flow's spec as it is now when it keeps no revision.
    pub(super) fn with(&self, name: &str, marked: Option<&str>) -> With {
        match self.assign {
            Some(a) => a.with(name, marked),
            None => With {
                hash: super::revision::hash(self.parent.spec),
                spec: None,
            },
        }
    }

    /// What starts a run of the object seen as `view` ([`served::trigger`]), served `with`:
    /// a change of its revision starts one; in a rollout by waves, a change of the flow alone
    /// starts none while its revision stays (objects the waves did not reach keep theirs).
    fn changed(&self, mark: Option<&Mark>, view: &Value, with: &With) -> Option<Value> {
        let mut flow = (self.parent.uid, self.parent.generation);
        let stays = mark.is_some_and(|m| m.revision.as_deref() == Some(with.hash.as_str()));
        if let (Some(m), true) = (mark, stays && self.assign.is_some_and(|a| a.waved)) {
            flow = (m.flow_uid.as_str(), m.flow_generation);
        }
        let changed = served::trigger(mark, flow, view, self.bind);
        let moved = self.assign.is_some() && mark.is_some_and(|m| m.revision.is_some()) && !stays;
        if changed.is_none() && moved {
            return Some(json!({"event": "update", "changed": []}));
        }
        changed
    }

    /// Starts the object's run `work` in a task of its own ([`tasks`]) and returns: the bound
    /// flow's reconcile never waits for an object's run (where no task can be started, a unit
    /// test's binder, it is run here).
    async fn start(&self, obj: &DynamicObject, work: Work) -> Served {
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        let key = Tasks::key(self.parent.uid, uid);
        let what = match &work {
            // The flow's generation, the object as its mark records it, and the attempt.
            Work::Steps {
                view,
                failures,
                with,
                related,
                ..
            } => self.steps_work(view, related, *failures, with),
            Work::Deleted { with, .. } => self.deleted_work(with),
        };
        let tasks = &self.r.own.object_runs;
        if tasks.going(&key, &what) {
            return Ok(None);
        }
        if !tasks.may_start(self.parent.uid, &key) {
            // As many runs going as a flow may have: a name in the queue until one ends (its
            // end wakes the flow).
            let m = &obj.metadata;
            let (ns, name) = (m.namespace.as_deref(), m.name.as_deref());
            let pending = &self.r.own.watches.pending;
            pending.changed(
                self.parent.uid,
                ns.unwrap_or_default(),
                name.unwrap_or_default(),
            );
            return Ok(None);
        }
        let name = object::key(obj);
        let outcomes = &self.r.own.outcomes;
        let revision = match &work {
            Work::Steps { with, .. } | Work::Deleted { with, .. } => Some(with.hash.clone()),
        };
        outcomes.running(self.parent.uid, &name, revision);
        let d = Detached {
            flow: self.r.flow_owned(),
            bind: self.bind.clone(),
            plural: self.plural.to_string(),
            objects: self.objects.clone(),
            object: obj.clone(),
            work,
        };
        match tasks.start(&key, &what, d) {
            Launch::Now | Launch::AlreadyGoing => Ok(None),
            Launch::Inline(d) => self.run_now(&d.object, d.work).await,
        }
    }

    /// Which run of the object a run of its steps is: the flow's generation, the object as its
    /// mark records it (its related objects' versions too), the attempt and the revision. A
    /// task going with it is not started twice; a progress record of another is not believed.
    fn steps_work(
        &self,
        view: &Value,
        related: &[(String, RelatedSeen)],
        failures: u32,
        with: &With,
    ) -> String {
        let mark = Mark::of(self.parent.uid, self.parent.generation, view, self.bind);
        let mark = mark.with_related(related);
        let h = &with.hash;
        format!("{}#{failures}@{h}", retry::digest(&mark.encode()))
    }

    /// Which run of the object a progress record belongs to: the object's change (as in
    /// [`Self::steps_work`]), the served mark as the run found it and the revision. The mark
    /// changes only when a run's end is recorded, so a run whose end was not (the controller
    /// killed, its status unwritten) is resumed by the next serve, and no later attempt takes on
    /// an earlier one's state.
    fn record_work(&self, it: &Due<'_>) -> String {
        let mark = Mark::of(self.parent.uid, self.parent.generation, &it.view, self.bind);
        let mark = mark.with_related(&it.related).encode();
        let found = retry::digest(it.raw.unwrap_or_default());
        format!("{}#{found}@{}", retry::digest(&mark), it.with.hash)
    }

    /// Which run of a deleted object its `onDelete` run is (see [`Self::steps_work`]).
    fn deleted_work(&self, with: &With) -> String {
        format!("delete@{}@{}", self.parent.generation, with.hash)
    }

    /// The keeper of `obj`'s run `work`'s progress ([`progress`]).
    fn keeper(&self, obj: &DynamicObject, work: &str) -> progress::Keeper {
        let flow = (self.parent.namespace, self.parent.name);
        let key = served::progress_key(flow.0, flow.1);
        let approval = self.r.own.approval_key.as_ref();
        progress::Keeper::new(approval, flow, obj, self.objects.clone(), (key, work))
    }

    /// Runs the object's run `work` to its end and records it.
    async fn run_now(&self, obj: &DynamicObject, work: Work) -> Served {
        match work {
            Work::Steps {
                view,
                key,
                raw,
                trigger,
                failures,
                with,
                related,
            } => {
                let due = Due {
                    view,
                    key,
                    raw: raw.as_deref(),
                    trigger,
                    failures,
                    with,
                    related,
                };
                self.run_and_record(obj, due).await
            }
            Work::Deleted { finalizer, with } => self.run_deleted(obj, &finalizer, &with).await,
        }
    }

    /// Runs `obj` (its run is due), then records the outcome: its status, Events, its served
    /// mark (with the retry schedule of a failed run) and what the flow's summary counts.
    async fn run_and_record(&self, obj: &DynamicObject, it: Due<'_>) -> Served {
        let name = object::key(obj);
        let policy = self.bind.retry.unwrap_or_default();
        let outcomes = &self.r.own.outcomes;
        let spec = it.with.spec.as_deref().unwrap_or(self.parent.spec);
        // The run reads the object with its status as this serve read it (`${object.status}`);
        // its mark is made from the view without it.
        let seen = object::run_view(&it.view, obj);
        let (made, compiled) = match self.compiled_with(spec, &seen, &it.trigger) {
            Ok(c) => c,
            // Permanent: the flow is refused as a whole (InvalidSpec); nothing to retry.
            Err(d) => {
                return Ok(Some(NotServed(format!(
                    "{name}: the flow does not compile: {d}"
                ))))
            }
        };
        let keeper = self.keeper(obj, &self.record_work(&it));
        let ran = self.run(
            &compiled,
            &made["spec"],
            (seen, it.trigger.clone()),
            (obj, &keeper),
        );
        let ran = self.shown_creating(obj, &compiled, ran);
        let ((phase, message, vars), permanent) = match ran.await {
            Ok((ran, permanent)) => (self.ended(&compiled, &ran), permanent),
            Err(why) => return Ok(Some(NotServed(format!("{name}: {why}")))),
        };
        let ended_at = retry_now();
        let failed = phase != FlowPhase::Succeeded;
        let failures = if failed {
            it.failures.saturating_add(1)
        } else {
            0
        };
        let message = message.map(|m| {
            let next = retry::told(&policy, failures, permanent, ended_at);
            format!("{m}; {next}")
        });
        // Told on the object after its status and mark are written (a Ready object's watcher
        // does not wait for the Event), or at once when they cannot be.
        let told = message.clone();
        let revision = it.with.hash.clone();
        self.outcome(&name, message.clone(), None, Some(revision.clone()));
        if let Err(e) = self
            .write_status(obj, &compiled, phase, message, &vars)
            .await
        {
            self.tell(obj, told.as_deref(), permanent).await;
            // Unrecorded: an error, so the object is tried again soon (not a refusal, which
            // waits for the next full pass, five minutes on), and at the latest when a backoff
            // from now is due.
            let n = failures.max(1);
            let due = retry::due(&policy, n, ended_at);
            let raw = it.raw.unwrap_or_default();
            let s = self.schedule(obj, n, due, Some(it.trigger), raw);
            outcomes.schedule(self.parent.uid, &name, Some(s));
            return Err(e);
        }
        let failure = failed.then_some((failures, permanent));
        let encoded = self
            .sealer()
            .seal(&self.ended_mark(&it, revision, ended_at, failure));
        let marked = self.mark(obj, &it.key, &encoded, keeper.removal()).await;
        if marked.is_ok() {
            // What the mark now records is what its next serve compares with.
            self.remember_related(&name, &it.related);
        }
        self.tell(obj, told.as_deref(), permanent).await;
        let refusal = marked?;
        let schedule = (failed && !permanent).then(|| {
            let due = retry::due(&policy, failures, ended_at);
            self.schedule(obj, failures, due, Some(it.trigger), &encoded)
        });
        outcomes.schedule(self.parent.uid, &name, schedule);
        Ok(refusal)
    }

    /// The served mark for the run `it` of revision `revision`, ended at `ended_at`, with its
    /// `failure` (failures in a row, whether permanent) if it failed: what it served, its
    /// related objects' versions and its retry schedule.
    fn ended_mark(
        &self,
        it: &Due<'_>,
        revision: String,
        ended_at: i64,
        failure: Option<(u32, bool)>,
    ) -> Mark {
        let mark = Mark::of(self.parent.uid, self.parent.generation, &it.view, self.bind);
        let mut mark = mark.with_related(&it.related);
        mark.failed = failure.is_some();
        mark.revision = Some(revision);
        mark.served_at = ended_at;
        if let Some((failures, permanent)) = failure {
            mark.failures = failures;
            mark.failed_at = ended_at;
            mark.permanent = permanent;
            mark.retry_trigger = Some(it.trigger.clone());
        }
        mark
    }

    /// Awaits the object's run `ran`; if it is still going after [`SHOW_CREATING_AFTER`] (it
    /// waits for something, or retries), first writes the object's status as a child's run
    /// would show it meanwhile (`Creating`, Progressing), unless it says so already. A run that
    /// ends sooner writes only its end.
    async fn shown_creating<F: std::future::Future>(
        &self,
        obj: &DynamicObject,
        compiled: &pseudoflow_compiler::Compiled,
        ran: F,
    ) -> F::Output {
        tokio::pin!(ran);
        let field = compiled.spec.bound.as_ref();
        let field = field.map(|b| b.status.phase_field.as_str()).unwrap_or("");
        let shown = !field.is_empty() && obj.data["status"][field] == "Creating";
        if shown {
            return ran.await;
        }
        tokio::select! {
            out = &mut ran => out,
            () = tokio::time::sleep(SHOW_CREATING_AFTER) => {
                let nothing = BTreeMap::new();
                let creating = self.write_status(obj, compiled, FlowPhase::Running, None, &nothing);
                // Unwritten: its end is written anyway, and says what happened.
                let _ = creating.await;
                ran.await
            }
        }
    }

    /// The flow a child for an object seen as `view` would have, with `trigger`, the bound
    /// flow's spec being `spec` (its own, or an older revision's: bind/rollout), and its
    /// compiled form: what an object's run (main or onDelete) walks.
    pub(super) fn compiled_with(
        &self,
        spec: &Value,
        view: &Value,
        trigger: &Value,
    ) -> Result<(Value, pseudoflow_compiler::Compiled), pseudoflow_crd::Diagnostics> {
        let parent = Parent {
            spec,
            ..self.parent
        };
        let made = child::child_flow(
            &parent,
            self.parent.name,
            self.plural,
            view,
            trigger,
            &BTreeMap::new(),
        );
        let id = FlowId {
            name: self.parent.name,
            namespace: Some(self.parent.namespace),
        };
        let mut compiled = compile(&id, &made["spec"])?;
        pseudoflow_compiler::record::place_for_object(&mut compiled);
        Ok((made, compiled))
    }

    /// The retry schedule of `obj`, due at `due` after `failures` failures in a row, for the
    /// mark `raw`.
    fn schedule(
        &self,
        obj: &DynamicObject,
        failures: u32,
        due: i64,
        trigger: Option<Value>,
        raw: &str,
    ) -> retry::Schedule {
        let m = &obj.metadata;
        retry::Schedule {
            object: (
                m.namespace.clone().unwrap_or_default(),
                m.name.clone().unwrap_or_default(),
            ),
            uid: m.uid.clone().unwrap_or_default(),
            failures,
            due,
            trigger: trigger.unwrap_or_else(|| json!({"event": "update", "changed": []})),
            mark: retry::digest(raw),
            held: 0,
        }
    }

    /// Tells the run's end on the object itself (`kubectl describe` shows it), under the
    /// flow's `options.events`: `ObjectServed`, or `ObjectFailed` with the failure (as its
    /// status says it, redacted) and whether it is tried again. The note names no attempt or
    /// time, so that the failures of one retried object fold into one counted series.
    async fn tell(&self, obj: &DynamicObject, failure: Option<&str>, permanent: bool) {
        let about = self.about(obj);
        let flow = format!("flow {}/{}", self.parent.namespace, self.parent.name);
        let Some(failure) = failure else {
            let note = format!("served by {flow}");
            let r = self.r;
            r.publish_about(about, EventType::Normal, "ObjectServed", &note)
                .await;
            return;
        };
        // The status's text up to the retry's time, which changes at each attempt.
        let cause = failure
            .rsplit_once("; attempt ")
            .map_or(failure, |(c, _)| c);
        let cause = cause.rsplit_once("; not retried").map_or(cause, |(c, _)| c);
        let then = if permanent {
            "not retried until the object changes"
        } else {
            "tried again with backoff (its status says when)"
        };
        let note = format!("{flow}: {cause}; {then}");
        let r = self.r;
        r.publish_about(about, EventType::Warning, "ObjectFailed", &note)
            .await;
    }

    /// [`Serving::about`], for the object as a run sees it (`${object}`).
    fn about_view(&self, view: &Value) -> ObjectReference {
        let m = &view["metadata"];
        let text = |k: &str| m[k].as_str().map(str::to_string);
        ObjectReference {
            api_version: Some(self.bind.api_version.clone()),
            kind: Some(self.bind.kind.clone()),
            name: text("name"),
            namespace: text("namespace"),
            uid: text("uid"),
            ..Default::default()
        }
    }

    /// A reference to the served object, for its Events.
    fn about(&self, obj: &DynamicObject) -> ObjectReference {
        let m = &obj.metadata;
        ObjectReference {
            api_version: Some(self.bind.api_version.clone()),
            kind: Some(self.bind.kind.clone()),
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            ..Default::default()
        }
    }

    /// The object's run, to its end, as the flow's ServiceAccount (Err: no client for it),
    /// from its progress on `obj` if `keeper` finds a record of it there.
    async fn run(
        &self,
        compiled: &pseudoflow_compiler::Compiled,
        spec: &Value,
        (object, trigger): (Value, Value),
        (obj, keeper): (&DynamicObject, &progress::Keeper),
    ) -> Result<(StoredRun, bool), String> {
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
            progress: keeper,
            metrics: &self.r.ctx.metrics,
            went_on: Default::default(),
            logged: Default::default(),
        };
        let run_id = format!("o{}", &crate::secret::random_hex()[..10]);
        let resume = keeper.found(obj);
        if resume.is_some() {
            tracing::info!(flow = %self.parent.name, object = %object::key(obj), "resuming an object's run from its progress record");
        }
        let ran = runner.run(compiled, spec, &run_id, resume).await;
        let told = [
            (&runner.logged, EventType::Normal, "Log"),
            (&runner.went_on, EventType::Warning, "StepFailed"),
        ];
        for (notes, ty, reason) in told {
            let notes = std::mem::take(&mut *notes.lock().expect("not poisoned"));
            for note in notes {
                let about = self.about_view(&runner.object);
                self.r.publish_about(about, ty, reason, &note).await;
            }
        }
        Ok(ran)
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
        let about = self.about(obj);
        self.r
            .publish_about(about, EventType::Warning, "StatusWriteFailed", &why)
            .await;
        Err(e.into())
    }

    /// The run's phase and failure (naming the failed step's path), counted.
    fn ended(
        &self,
        compiled: &pseudoflow_compiler::Compiled,
        ran: &StoredRun,
    ) -> (FlowPhase, Option<String>, BTreeMap<String, Value>) {
        let r = self.r;
        let vars = ran.vars.clone();
        if ran.state.phase == RunPhase::Succeeded {
            r.ctx.metrics.run_finished(&r.key(), "Succeeded");
            return (FlowPhase::Succeeded, None, vars);
        }
        r.ctx.metrics.run_finished(&r.key(), "Failed");
        let failure = ran.state.failure.as_ref();
        let message = failure
            .map(|f| failure_message(&compiled.plan, f))
            .unwrap_or_else(|| "the run did not end".into());
        (FlowPhase::Failed, Some(message), vars)
    }

    /// Records what the serve of object `name` saw, for the summary: a run's end always (now),
    /// an unchanged object's mark only where nothing is known yet (after a restart; `marked`:
    /// when its mark says it was served, else now); `revision`: the hash of the revision that
    /// served it (that ran, or that its mark names).
    fn outcome(
        &self,
        name: &str,
        failure: Option<String>,
        marked: Option<i64>,
        revision: Option<String>,
    ) {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let at = marked.filter(|at| *at > 0 && *at <= now).unwrap_or(now);
        let o = outcomes::Outcome {
            failure,
            at,
            revision,
        };
        let outcomes = &self.r.own.outcomes;
        if marked.is_none() {
            outcomes.record(self.parent.uid, name.to_string(), Some(o));
        } else {
            outcomes.record_if_unknown(self.parent.uid, name, o);
        }
    }

    /// Writes the object's served mark (after its status: see the module's doc), removing its
    /// run's progress record (`removal`) in the same write.
    async fn mark(
        &self,
        obj: &DynamicObject,
        key: &str,
        mark: &str,
        removal: Option<(String, Value)>,
    ) -> Served {
        let mut annotations = serde_json::Map::new();
        annotations.insert(key.to_string(), Value::String(mark.to_string()));
        annotations.extend(removal);
        let patch = json!({"metadata": {"annotations": annotations}});
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

/// Runs one object's run in its task ([`tasks`]), to its end, for the bound flow as `r` read it:
/// records it as a serve would have (a refusal for the flow's summary), then wakes the flow so
/// that its summary counts it.
pub(crate) async fn finish(r: &Reconciling<'_, Binder>, d: Detached) {
    let parent = Parent::of(r);
    let serving = Serving {
        r,
        bind: &d.bind,
        parent,
        plural: &d.plural,
        objects: d.objects.clone(),
        // The run's revision and related objects are in its work.
        assign: None,
        related: &[],
    };
    let name = object::key(&d.object);
    let refusal = match serving.run_now(&d.object, d.work).await {
        Ok(refusal) => refusal,
        Err(e) => {
            // Its retry is scheduled (run_and_record): the flow serves it again then.
            tracing::warn!(object = %name, error = %e, "recording an object's run");
            Some(NotServed(format!("serving it: {e}")))
        }
    };
    let refusal = refusal.as_ref().map(|why| why.0.as_str());
    r.own.watches.pending.served(r.uid, &name, refusal);
    r.told().await;
    let wake = r.own.watches.waker(r.ns(), r.flow_id.name);
    r.own.object_runs.wake_soon(r.uid, wake);
}

/// The objects (namespace, name) of the bound flow `r` whose retry is due now (none for a flow
/// recorded in children, which keeps no schedule).
pub(crate) fn retries_due(r: &Reconciling<'_, Binder>) -> Vec<(String, String)> {
    let policy = retry_policy(r);
    let hold = |failures: u32| i64::try_from(policy.backoff(failures)).unwrap_or(i64::MAX / 2);
    r.own.outcomes.due(r.uid, retry_now(), Some(&hold)).0
}

/// The bound flow's `bind.retry` (its default when absent).
fn retry_policy(r: &Reconciling<'_, Binder>) -> pseudoflow_crd::bind::BindRetry {
    let retry = r.flow.data.pointer("/spec/bind/retry").cloned();
    retry
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

/// How soon the bound flow `r` must be reconciled for its next retry (a day when none).
pub(crate) fn next_retry(r: &Reconciling<'_, Binder>) -> std::time::Duration {
    let now = retry_now();
    let (due, next) = r.own.outcomes.due(r.uid, now, None);
    let secs = match (due.is_empty(), next) {
        (false, _) => 1,
        (true, Some(at)) => u64::try_from(at - now).unwrap_or(1).max(1),
        (true, None) => 86_400,
    };
    std::time::Duration::from_secs(secs)
}

/// Now, in the Unix seconds retries are scheduled in.
fn retry_now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}
