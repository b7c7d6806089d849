//! The step instances of a run as the step-duration metrics count them: every step type, a
//! compound step (loop, parallel, retry, if, include) from its start node's start to its end
//! node's end. Pure: [`crate::metrics::Metrics::observe_steps`] adds the sub-second clock.

use std::collections::BTreeMap;

use pseudoflow_compiler::plan::{NodeKind, Plan};

use crate::metrics::StepSeen;
use pseudoflow_walk::{split_instance_id, StoredRun};

/// Every step instance of `run` that has started, with when it started and (once it and, for
/// a compound step, its end node have ended) when it ended.
pub fn steps_seen(plan: &Plan, run: &StoredRun) -> Vec<StepSeen> {
    // A compound step's end node, by its start node.
    let ends: BTreeMap<&str, &str> = plan
        .nodes()
        .filter_map(|n| match &n.kind {
            NodeKind::CompoundEnd { start, .. } => Some((start.as_str(), n.id.as_str())),
            _ => None,
        })
        .collect();
    #[derive(Default)]
    struct Group {
        started_at: Option<i64>,
        attempt: u32,
        start_done: Option<i64>,
        end_done: Option<i64>,
        took_ms: Option<u64>,
    }
    let mut groups: BTreeMap<(String, Vec<String>), Group> = BTreeMap::new();
    for (id, inst) in &run.state.instances {
        let (node_id, key) = split_instance_id(id);
        let Some(node) = plan.node(&node_id) else {
            continue;
        };
        let (start_id, is_end) = match &node.kind {
            NodeKind::CompoundEnd { start, .. } => (start.clone(), true),
            NodeKind::Start | NodeKind::End => continue,
            _ => (node.id.clone(), false),
        };
        let g = groups.entry((start_id, key)).or_default();
        let done = inst
            .phase
            .settled()
            .then(|| inst.finished_at.or(inst.started_at))
            .flatten();
        if is_end {
            g.end_done = done;
        } else {
            g.started_at = inst.started_at;
            g.attempt = inst.attempt;
            g.start_done = done;
            g.took_ms = inst.took_ms.filter(|_| inst.phase.settled());
        }
    }
    let mut out = Vec::new();
    for ((start_id, key), g) in groups {
        let (Some(started_at), Some(node)) = (g.started_at, plan.node(&start_id)) else {
            continue;
        };
        let (finished_at, took) = match ends.get(start_id.as_str()) {
            Some(_) => (g.start_done.and(g.end_done), None),
            None => (g.start_done, g.took_ms.map(|ms| ms as f64 / 1000.0)),
        };
        out.push(StepSeen {
            id: format!(
                "{}/{}@{}#{}",
                run.run_id,
                node.path,
                key.join("/"),
                g.attempt
            ),
            step_type: node.step_type.clone(),
            started_at,
            finished_at,
            took,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use pseudoflow_walk::Phase;

    fn plan() -> Plan {
        pseudoflow_compiler::compile(
            &pseudoflow_compiler::FlowId {
                name: "f",
                namespace: Some("ns"),
            },
            &json!({"steps": [
                {"type": "log", "message": "x"},
                {"type": "loop", "forEach": ["a", "b"], "steps": [{"type": "sleep", "seconds": 1}]}
            ]}),
        )
        .unwrap()
        .plan
    }

    fn at(run: &mut StoredRun, id: &str, phase: Phase, started: i64, finished: Option<i64>) {
        let inst = run.state.instances.entry(id.into()).or_default();
        inst.phase = phase;
        inst.started_at = Some(started);
        inst.finished_at = finished;
    }

    #[test]
    fn every_step_type_is_seen_and_a_compound_ends_with_its_end_node() {
        let plan = plan();
        let mut run = StoredRun {
            run_id: "r1".into(),
            ..Default::default()
        };
        at(&mut run, "start", Phase::Succeeded, 10, Some(10));
        at(&mut run, "s0", Phase::Succeeded, 10, Some(10));
        at(&mut run, "s1", Phase::Succeeded, 10, Some(10));
        at(&mut run, "s1-s0@0", Phase::Succeeded, 10, Some(11));
        at(&mut run, "s1-s0@1", Phase::Running, 11, None);
        let seen = steps_seen(&plan, &run);
        let by_id: BTreeMap<&str, (&str, Option<i64>)> = seen
            .iter()
            .map(|s| (s.id.as_str(), (s.step_type.as_str(), s.finished_at)))
            .collect();
        assert_eq!(
            by_id,
            BTreeMap::from([
                ("r1/spec.steps[0]@#0", ("log", Some(10))),
                // The loop's start is done, but not its end: the loop still runs.
                ("r1/spec.steps[1]@#0", ("loop", None)),
                ("r1/spec.steps[1].steps[0]@0#0", ("sleep", Some(11))),
                ("r1/spec.steps[1].steps[0]@1#0", ("sleep", None)),
            ])
        );
        at(&mut run, "s1-s0@1", Phase::Succeeded, 11, Some(12));
        at(&mut run, "s1-end", Phase::Succeeded, 12, Some(12));
        let seen = steps_seen(&plan, &run);
        let looped = seen.iter().find(|s| s.step_type == "loop").unwrap();
        assert_eq!((looped.started_at, looped.finished_at), (10, Some(12)));
        assert_eq!(
            looped.took, None,
            "a compound step has no Job to measure it"
        );
        // A step its Job measured carries the measurement; one still running does not.
        run.state.instances.get_mut("s1-s0@0").unwrap().took_ms = Some(1250);
        let seen = steps_seen(&plan, &run);
        let first = seen.iter().find(|s| s.id.ends_with("@0#0")).unwrap();
        assert_eq!(first.took, Some(1.25));
    }
}
