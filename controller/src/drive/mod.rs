//! One run driver: how the controller carries out what the walker (`pseudoflow_walk`) decided
//! for one node instance, the same for a plain flow's run (`crate::reconcile::run`: state in
//! its run-state Secret, pod steps in Jobs) and a bound object's run
//! (`crate::bind::in_object::run`: in memory, to its end). It builds the instance's scope
//! (vars, `${object}`/`${trigger}`, what earlier steps set, its loop's item and index), runs
//! controller-local nodes, builds the request of an API step the controller runs itself
//! ([`crate::in_controller`]) and starts it, and evaluates a condition in the controller
//! ([`condition`]). It knows nothing of the DAG: the walker decides, the driver does, and each
//! caller records (docs/architecture.md#one-run-driver).

pub mod condition;
mod in_controller;

use pseudoflow_compiler::expr::Scope;
use pseudoflow_compiler::lower::FlowRef;
use pseudoflow_compiler::names::job_name;
use pseudoflow_compiler::plan::PlanNode;
use pseudoflow_compiler::Engine;
use pseudoflow_crd::bind::{OBJECT_VAR, TRIGGER_VAR};
use pseudoflow_crd::PseudoFlowSpec;
use pseudoflow_walk::{includes, local, Completion, StoredRun, Walker};
use serde_json::Value;

/// What one run's instances are carried out with: one per drive of a run, borrowing all.
pub struct Driver<'a> {
    /// The expression engine (`${...}`).
    pub engine: &'a Engine,
    /// The flow the run belongs to (its steps act as its ServiceAccount; its uid keys them).
    pub flow: &'a FlowRef,
    /// The spec the run started with: its `vars` and its quoting.
    pub spec: &'a PseudoFlowSpec,
    /// The run's walker: its plan and loop variables.
    pub walker: &'a Walker<'a>,
    /// The bound object (`${object}`) and what started its run (`${trigger}`), when the run
    /// serves one: a child flow's `spec.bound`, or the object a bound flow runs in itself.
    pub bound: Option<(&'a Value, &'a Value)>,
}

/// What a controller-local node did: what the walker is told, and the Event a `log` asks for.
pub struct Local {
    /// How it ended.
    pub completion: Completion,
    /// What a `log` logs, published as an Event by the caller.
    pub event: Option<String>,
}

impl Driver<'_> {
    /// The variables instance `key` of `node` sees: the flow's (and its includes'), the bound
    /// object and trigger, what earlier steps set, and its loop's item and index.
    pub fn scope(&self, run: &StoredRun, node: &PlanNode, key: &[String]) -> Scope {
        let plan = self.walker.plan();
        let mut s: Scope = includes::base_vars(plan, node, &self.spec.vars, &run.includes)
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        if let Some((object, trigger)) = self.bound {
            s.insert(OBJECT_VAR.into(), object.clone());
            s.insert(TRIGGER_VAR.into(), trigger.clone());
        }
        s.extend(run.vars.clone());
        s.extend(self.walker.loop_vars(node, key, &run.state));
        s
    }

    /// Runs controller-local work (`log`, `eval`, `template`, a loop's items) in `sc`, setting
    /// its variable in the run. Expressions only: what fails it fails it again.
    pub fn run_local(&self, run: &mut StoredRun, node: &PlanNode, sc: &Scope) -> Local {
        let res = local::run(self.engine, node, sc);
        if let Some((k, v)) = res.var {
            run.vars.insert(k, v);
        }
        Local {
            completion: res.completion.into(),
            event: res.event,
        }
    }

    /// The name a Job running the instance would have; the controller's steps are keyed by it.
    pub fn job_name(&self, run: &StoredRun, node: &str, key: &[String], attempt: u32) -> String {
        job_name(&self.flow.name, &run.run_id, node, key, attempt.max(1))
    }

    /// The key the controller knows the instance's work by ([`crate::in_controller::key`]).
    pub fn step_key(&self, run: &StoredRun, node: &str, key: &[String], attempt: u32) -> String {
        let job = self.job_name(run, node, key, attempt);
        crate::in_controller::key(&self.flow.uid, &job)
    }
}

/// A failed completion saying `message`.
pub fn failed(message: String) -> Completion {
    Completion {
        ok: false,
        message,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
