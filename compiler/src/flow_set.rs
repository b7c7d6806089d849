//! Several flows checked together (`pseudoflow-compile a.yaml b.yaml`): the `includeFlow` steps
//! among them and the cycles they close (`a → b → a`), found before anything runs. A flow that
//! includes itself is a compile error of its own ([`crate::compile`]); a cycle through flows
//! the compiler was not shown is found by the controller at run time.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use pseudoflow_crd::{PseudoFlowSpec, Step, StepKind};

use crate::FlowId;

/// A flow as `includeFlow` names it: its namespace (None when the file gives none) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowKey {
    /// `metadata.namespace`, or the including flow's for an `includeFlow` without one.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl FlowKey {
    /// The key of a flow being compiled.
    pub fn of(flow: &FlowId) -> Self {
        FlowKey {
            namespace: flow.namespace.map(str::to_string),
            name: flow.name.to_string(),
        }
    }
}

impl fmt::Display for FlowKey {
    /// `namespace/name`, or `name` when the namespace is not known.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// One `includeFlow` step: which flow it is in, where (`spec.steps[1].name`), which it includes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncludeEdge {
    /// The including flow.
    pub from: FlowKey,
    /// Path of the step's `name` field (the included flow's name) in the including flow.
    pub path: String,
    /// The included flow.
    pub to: FlowKey,
}

/// The `includeFlow` steps of a flow (in `steps` and `onDelete`, at any depth). Steps whose
/// name or namespace is computed at run time (`${...}`) are left out: only the controller
/// knows where they lead.
pub fn include_edges(flow: &FlowId, spec: &PseudoFlowSpec) -> Vec<IncludeEdge> {
    let from = FlowKey::of(flow);
    let mut out = Vec::new();
    collect(&from, &spec.steps, "spec.steps", &mut out);
    if let Some(steps) = &spec.on_delete {
        collect(&from, steps, "spec.onDelete", &mut out);
    }
    out
}

fn collect(from: &FlowKey, steps: &[Step], path: &str, out: &mut Vec<IncludeEdge>) {
    for (i, step) in steps.iter().enumerate() {
        let here = format!("{path}[{i}]");
        if let (Some(name), StepKind::IncludeFlow(p)) = (step.included_flow(), &step.kind) {
            let namespace = p.namespace.clone().or_else(|| from.namespace.clone());
            let computed =
                name.contains("${") || namespace.as_deref().is_some_and(|n| n.contains("${"));
            if !computed {
                out.push(IncludeEdge {
                    from: from.clone(),
                    path: format!("{here}.name"),
                    to: FlowKey {
                        namespace,
                        name: name.to_string(),
                    },
                });
            }
        }
        for (field, children) in step.kind.params().children() {
            collect(
                from,
                children,
                &pseudoflow_crd::text::join(&here, &field),
                out,
            );
        }
    }
}

/// The cycles the edges close among two or more flows: one per group of flows that include
/// each other (a strongly connected component), as the shortest chain of steps from the
/// group's first flow (by namespace and name) back to it. Self-inclusion is left out (the
/// compiler reports it for the one flow).
pub fn include_cycles(edges: &[IncludeEdge]) -> Vec<Vec<&IncludeEdge>> {
    let mut next: BTreeMap<&FlowKey, Vec<&IncludeEdge>> = BTreeMap::new();
    for e in edges.iter().filter(|e| e.from != e.to) {
        next.entry(&e.from).or_default().push(e);
    }
    let reach = |start: &FlowKey| -> BTreeSet<FlowKey> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.clone()];
        while let Some(k) = todo.pop() {
            for e in next.get(&k).into_iter().flatten() {
                if seen.insert(e.to.clone()) {
                    todo.push(e.to.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&FlowKey, BTreeSet<FlowKey>> =
        next.keys().map(|k| (*k, reach(k))).collect();
    let mut done: BTreeSet<&FlowKey> = BTreeSet::new();
    let mut cycles = Vec::new();
    // Keys are visited in order, so each group starts at its smallest flow.
    for (start, from_start) in &reachable {
        if done.contains(start) || !from_start.contains(*start) {
            continue;
        }
        let group: BTreeSet<&FlowKey> = reachable
            .iter()
            .filter(|(k, r)| from_start.contains(**k) && r.contains(*start))
            .map(|(k, _)| *k)
            .collect();
        done.extend(group.iter().copied());
        cycles.push(shortest_cycle(start, &group, &next));
    }
    cycles
}

/// Breadth-first, inside the group, from `start` back to it.
fn shortest_cycle<'e>(
    start: &FlowKey,
    group: &BTreeSet<&FlowKey>,
    next: &BTreeMap<&FlowKey, Vec<&'e IncludeEdge>>,
) -> Vec<&'e IncludeEdge> {
    let mut came_by: BTreeMap<&FlowKey, &'e IncludeEdge> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(k) = queue.pop_front() {
        for e in next.get(k).into_iter().flatten() {
            if !group.contains(&e.to) || came_by.contains_key(&e.to) {
                continue;
            }
            came_by.insert(&e.to, e);
            if &e.to == start {
                let mut chain = vec![*e];
                let mut at = &e.from;
                while at != start {
                    let e = came_by[at];
                    chain.push(e);
                    at = &e.from;
                }
                chain.reverse();
                return chain;
            }
            queue.push_back(&e.to);
        }
    }
    unreachable!("every flow of a group reaches the group's start")
}

/// What is wrong with `cycle`, said at its step `at` (an index into it): the chain starting
/// with that step's flow, `a → b → a`.
pub fn describe_cycle(cycle: &[&IncludeEdge], at: usize) -> String {
    let n = cycle.len();
    let mut chain: Vec<String> = (0..n)
        .map(|i| cycle[(at + i) % n].from.to_string())
        .collect();
    chain.push(cycle[at].from.to_string());
    format!(
        "includeFlow cycle {}: a run of any of these flows would include the next forever",
        chain.join(" → ")
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn edges(name: &str, ns: Option<&str>, steps: serde_json::Value) -> Vec<IncludeEdge> {
        let id = FlowId {
            name,
            namespace: ns,
        };
        let spec: PseudoFlowSpec = serde_json::from_value(json!({"steps": steps})).unwrap();
        include_edges(&id, &spec)
    }

    fn inc(name: &str) -> serde_json::Value {
        json!({"type": "includeFlow", "name": name})
    }

    fn names(cycle: &[&IncludeEdge]) -> Vec<String> {
        cycle
            .iter()
            .map(|e| format!("{} {}", e.from, e.path))
            .collect()
    }

    #[test]
    fn a_cycle_of_two_flows_is_found_from_its_smallest_flow() {
        let mut all = edges(
            "b",
            Some("ops"),
            json!([{"type": "log", "message": "x"}, inc("a")]),
        );
        all.extend(edges("a", Some("ops"), json!([inc("b")])));
        let cycles = include_cycles(&all);
        assert_eq!(cycles.len(), 1);
        assert_eq!(
            names(&cycles[0]),
            ["ops/a spec.steps[0].name", "ops/b spec.steps[1].name"]
        );
        assert_eq!(
            describe_cycle(&cycles[0], 1),
            "includeFlow cycle ops/b → ops/a → ops/b: a run of any of these flows would include the next forever"
        );
    }

    #[test]
    fn nested_steps_namespaces_and_on_delete_count() {
        // c includes d (another namespace) inside a retry; d includes c back from onDelete.
        let mut all = edges(
            "c",
            Some("x"),
            json!([{"type": "retry", "attempts": 2, "steps": [{"type": "includeFlow", "name": "d", "namespace": "y"}]}]),
        );
        let id = FlowId {
            name: "d",
            namespace: Some("y"),
        };
        let spec: PseudoFlowSpec = serde_json::from_value(json!({
            "steps": [{"type": "log", "message": "d"}],
            "onDelete": [{"type": "includeFlow", "name": "c", "namespace": "x"}]
        }))
        .unwrap();
        all.extend(include_edges(&id, &spec));
        let cycles = include_cycles(&all);
        assert_eq!(
            names(&cycles[0]),
            [
                "x/c spec.steps[0].steps[0].name",
                "y/d spec.onDelete[0].name"
            ]
        );
    }

    #[test]
    fn chains_self_inclusion_other_namespaces_and_computed_names_are_no_cycle() {
        let mut all = edges("a", Some("ops"), json!([inc("b")]));
        all.extend(edges("b", Some("ops"), json!([inc("c"), inc("b")])));
        // The same name in another namespace is another flow.
        all.extend(edges(
            "c",
            Some("ops"),
            json!([{"type": "includeFlow", "name": "a", "namespace": "other"}]),
        ));
        all.extend(edges("a", Some("other"), json!([inc("${next}")])));
        assert!(include_cycles(&all).is_empty(), "{all:#?}");
        assert_eq!(all.len(), 4, "the computed name is left out");
    }

    #[test]
    fn each_group_is_reported_once_with_its_shortest_cycle() {
        // a → b → c → a and a → c: the shortest way back from a is a → c → a.
        let mut all = edges("a", None, json!([inc("b"), inc("c")]));
        all.extend(edges("b", None, json!([inc("c")])));
        all.extend(edges("c", None, json!([inc("a")])));
        all.extend(edges("p", None, json!([inc("q")])));
        all.extend(edges("q", None, json!([inc("p")])));
        let cycles = include_cycles(&all);
        let chains: Vec<Vec<String>> = cycles.iter().map(|c| names(c)).collect();
        assert_eq!(
            chains,
            [
                vec!["a spec.steps[1].name", "c spec.steps[0].name"],
                vec!["p spec.steps[0].name", "q spec.steps[0].name"]
            ]
        );
    }
}
