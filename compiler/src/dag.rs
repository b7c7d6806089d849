//! Lowers a validated step list into the [`Plan`] DAG. Each step becomes a fragment: an entry
//! node, a *unit* node (whose failure is the step's failure: the node itself for a leaf, the end
//! node for a compound) and dangling exits that the next step's entry is wired to.
//!
//! Building also enforces the plan's size ([`Budget`]): steps counted in document order, step
//! depth with included steps in place, and the iterations of literal loops.

use petgraph::graph::{DiGraph, NodeIndex};
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{Diagnostics, Step, StepKind};
use serde_json::Value;

use crate::compile::Expansions;
use crate::limits::{PlanLimits, MAX_RUN_ITERATIONS, MAX_STEP_DEPTH};
use crate::plan::{EdgeKind, LoopOver, NodeKind, Plan, PlanNode};

mod maintenance;

/// What a flow's plans (its steps and its onDelete) have used of the limits so far, and the
/// problems found: one budget is shared by both plans.
pub struct Budget {
    limits: PlanLimits,
    steps: usize,
    iterations: usize,
    too_deep: bool,
    /// Where the plan outgrew a limit (empty when it did not).
    pub diags: Diagnostics,
}

impl Budget {
    /// A fresh budget under `limits`.
    pub fn new(limits: PlanLimits) -> Self {
        Budget {
            limits,
            steps: 0,
            iterations: 0,
            too_deep: false,
            diags: Diagnostics::default(),
        }
    }

    /// Counts the step at `path` (built only when it is the first one beyond the limit).
    fn step(&mut self, path: impl FnOnce() -> String) {
        self.steps += 1;
        if self.steps == self.limits.max_steps.saturating_add(1) {
            self.diags.error(
                path(),
                format!(
                    "the flow has more than {} steps (nested, onDelete and included steps counted)",
                    self.limits.max_steps
                ),
            );
        }
    }

    /// Counts `n` iterations of the loop at `path`.
    fn iterations(&mut self, path: &str, n: usize) {
        let before = self.iterations;
        self.iterations = before.saturating_add(n);
        if before <= MAX_RUN_ITERATIONS && self.iterations > MAX_RUN_ITERATIONS {
            self.diags.error(
                format!("{path}.forEach"),
                format!(
                    "the run would start more than {MAX_RUN_ITERATIONS} loop iterations \
                     (nested loops multiply)"
                ),
            );
        }
    }
}

/// Where a list of steps sits: its path, id prefix and the structure around it.
#[derive(Clone)]
struct Scope {
    path: String,
    id_prefix: String,
    parent: Option<String>,
    loops: Vec<String>,
    on_node: bool,
    depth: usize,
    /// How often one pass through this list runs: the product of the enclosing literal loops'
    /// item counts.
    runs: usize,
}

struct Fragment {
    entry: NodeIndex,
    /// The node whose failure is this fragment's failure (what an `onError` attaches to).
    unit: NodeIndex,
    exits: Vec<(NodeIndex, EdgeKind)>,
}

struct Builder<'e> {
    g: DiGraph<PlanNode, EdgeKind>,
    expansions: &'e Expansions,
    budget: &'e mut Budget,
}

/// Builds the DAG of `steps` (already validated) rooted at `root_path` (`spec.steps`); an
/// `include`/`includeFlow` whose fetched steps are in `expansions` gets them as its body. Where
/// the plan outgrows a limit is recorded in `budget`; a step nested too deep is built as a leaf,
/// so building never recurses deeper than the limit.
pub fn build_plan(
    steps: &[Step],
    root_path: &str,
    id_prefix: &str,
    expansions: &Expansions,
    budget: &mut Budget,
) -> Plan {
    let mut b = Builder {
        g: DiGraph::new(),
        expansions,
        budget,
    };
    let scope = Scope {
        path: root_path.to_string(),
        id_prefix: id_prefix.to_string(),
        parent: None,
        loops: vec![],
        on_node: false,
        depth: 1,
        runs: 1,
    };
    let start = b.structural(
        &scope,
        join_id(id_prefix, "start"),
        "start",
        NodeKind::Start,
    );
    let body = b.list(steps, &scope);
    let end = b.structural(&scope, join_id(id_prefix, "end"), "end", NodeKind::End);
    b.g.add_edge(start, body.entry, EdgeKind::Next);
    b.connect(&body.exits, end);
    crate::fuse::mark_segments(&mut b.g);
    Plan::new(b.g, start, end)
}

/// Exits of a step's unit: `always` when the step continues on error, else `next`.
fn unit_exits(step: &Step, unit: NodeIndex) -> Vec<(NodeIndex, EdgeKind)> {
    let kind = if step.continue_on_error {
        EdgeKind::Always
    } else {
        EdgeKind::Next
    };
    vec![(unit, kind)]
}

fn join_id(prefix: &str, id: &str) -> String {
    if prefix.is_empty() {
        id.to_string()
    } else {
        format!("{prefix}-{id}")
    }
}

impl Builder<'_> {
    fn connect(&mut self, exits: &[(NodeIndex, EdgeKind)], to: NodeIndex) {
        for (from, kind) in exits {
            self.g.add_edge(*from, to, *kind);
        }
    }

    fn structural(&mut self, scope: &Scope, id: String, ty: &str, kind: NodeKind) -> NodeIndex {
        self.g.add_node(PlanNode {
            id,
            path: scope.path.clone(),
            step_type: ty.to_string(),
            name: None,
            kind,
            placement: Placement::Structure,
            parent: scope.parent.clone(),
            loops: scope.loops.clone(),
            on_node: scope.on_node,
            continue_on_error: false,
            timeout_seconds: None,
            step: None,
            depth: scope.depth,
            segment: None,
        })
    }

    /// One list of steps in sequence; `when` and `onError` pair with their neighbours.
    fn list(&mut self, steps: &[Step], scope: &Scope) -> Fragment {
        let mut frags: Vec<Fragment> = Vec::new();
        let mut i = 0;
        while i < steps.len() {
            let here = self.step_scope(scope, i, "s");
            self.budget.step(|| here.path.clone());
            let mut frag = if let StepKind::When(_) = steps[i].kind {
                // when + the step it guards form one fragment.
                let cond = self.node(&steps[i], &here, NodeKind::Condition, Placement::Api);
                i += 1;
                let guarded_scope = self.step_scope(scope, i, "s");
                self.budget.step(|| guarded_scope.path.clone());
                let (guarded, unit) = self.step(&steps[i], &guarded_scope);
                self.g.add_edge(cond, guarded, EdgeKind::Then);
                let mut exits = unit_exits(&steps[i], unit);
                exits.push((cond, EdgeKind::Else));
                Fragment {
                    entry: cond,
                    unit,
                    exits,
                }
            } else {
                let (entry, unit) = self.step(&steps[i], &here);
                Fragment {
                    entry,
                    unit,
                    exits: unit_exits(&steps[i], unit),
                }
            };
            if let Some(StepKind::OnError(handler)) = steps.get(i + 1).map(|s| &s.kind) {
                self.budget.step(|| format!("{}[{}]", scope.path, i + 1));
                let hscope = Scope {
                    path: format!("{}[{}].steps", scope.path, i + 1),
                    id_prefix: join_id(&scope.id_prefix, &format!("s{}", i + 1)),
                    depth: scope.depth + 1,
                    ..scope.clone()
                };
                let h = self.list(&handler.steps, &hscope);
                self.g.add_edge(frag.unit, h.entry, EdgeKind::OnFailure);
                frag.exits.extend(h.exits);
                i += 1;
            }
            frags.push(frag);
            i += 1;
        }
        for w in 1..frags.len() {
            let exits = std::mem::take(&mut frags[w - 1].exits);
            let entry = frags[w].entry;
            self.connect(&exits, entry);
        }
        let entry = frags[0].entry;
        let last = frags.pop().expect("validated lists are not empty");
        Fragment {
            entry,
            unit: last.unit,
            exits: last.exits,
        }
    }

    fn step_scope(&self, scope: &Scope, i: usize, letter: &str) -> Scope {
        Scope {
            path: format!("{}[{i}]", scope.path),
            id_prefix: join_id(&scope.id_prefix, &format!("{letter}{i}")),
            ..scope.clone()
        }
    }

    fn node(
        &mut self,
        step: &Step,
        scope: &Scope,
        kind: NodeKind,
        placement: Placement,
    ) -> NodeIndex {
        self.g.add_node(PlanNode {
            id: scope.id_prefix.clone(),
            path: scope.path.clone(),
            step_type: step.kind.type_name().to_string(),
            name: step.name.clone(),
            kind,
            placement,
            parent: scope.parent.clone(),
            loops: scope.loops.clone(),
            on_node: scope.on_node,
            continue_on_error: step.continue_on_error,
            timeout_seconds: step.timeout_seconds,
            step: Some(step.clone()),
            depth: scope.depth,
            segment: None,
        })
    }

    fn end_node(&mut self, step: &Step, scope: &Scope, kind: NodeKind) -> NodeIndex {
        let n = self.node(step, scope, kind, Placement::Structure);
        let node = &mut self.g[n];
        node.id = format!("{}-end", scope.id_prefix);
        node.step_type = format!("{}-end", step.kind.type_name());
        node.step = None;
        n
    }

    fn inner(
        &self,
        scope: &Scope,
        end_id: &str,
        field: &str,
        id_part: &str,
        loop_id: Option<&str>,
        on_node: bool,
    ) -> Scope {
        let mut loops = scope.loops.clone();
        loops.extend(loop_id.map(str::to_string));
        Scope {
            path: format!("{}.{field}", scope.path),
            id_prefix: if id_part.is_empty() {
                scope.id_prefix.clone()
            } else {
                format!("{}-{id_part}", scope.id_prefix)
            },
            parent: Some(end_id.to_string()),
            loops,
            on_node: scope.on_node || on_node,
            depth: scope.depth + 1,
            runs: scope.runs,
        }
    }

    /// One step (not `when`/`onError`, which pair with neighbours): its entry and unit node.
    fn step(&mut self, step: &Step, scope: &Scope) -> (NodeIndex, NodeIndex) {
        let id = scope.id_prefix.clone();
        let end_id = format!("{id}-end");
        let compound_end = |start: &str, wait_for_all: bool, run_on| NodeKind::CompoundEnd {
            start: start.to_string(),
            wait_for_all,
            run_on,
        };
        if scope.depth > MAX_STEP_DEPTH {
            // Only included steps get here: validation bounds the depth of the flow's own.
            if !std::mem::replace(&mut self.budget.too_deep, true) {
                self.budget.diags.error(
                    scope.path.clone(),
                    format!(
                        "steps nested deeper than {MAX_STEP_DEPTH} levels (included steps counted)"
                    ),
                );
            }
            let n = self.node(step, scope, NodeKind::Action, Placement::Structure);
            return (n, n);
        }
        match &step.kind {
            StepKind::If(p) => {
                let cond = self.node(step, scope, NodeKind::Condition, Placement::Api);
                self.g[cond].parent = Some(end_id.clone());
                let then = self.list(
                    &p.then,
                    &self.inner(scope, &end_id, "then", "then", None, false),
                );
                self.g.add_edge(cond, then.entry, EdgeKind::Then);
                let els = p.else_.as_ref().map(|e| {
                    self.list(e, &self.inner(scope, &end_id, "else", "else", None, false))
                });
                let end = self.end_node(step, scope, compound_end(&id, true, None));
                self.connect(&then.exits, end);
                match els {
                    Some(els) => {
                        self.g.add_edge(cond, els.entry, EdgeKind::Else);
                        self.connect(&els.exits, end);
                    }
                    None => {
                        self.g.add_edge(cond, end, EdgeKind::Else);
                    }
                }
                (cond, end)
            }
            StepKind::Loop(p) => {
                let over = LoopOver::Items(p.for_each.clone());
                let mut scope = scope.clone();
                if let Value::Array(items) = &p.for_each {
                    let n = scope.runs.saturating_mul(items.len());
                    self.budget.iterations(&scope.path, n);
                    scope.runs = n;
                }
                self.body_compound(
                    step,
                    &scope,
                    NodeKind::LoopStart {
                        over,
                        max_parallel: p.max_parallel,
                        end: end_id.clone(),
                    },
                    Placement::Controller,
                    &p.steps,
                    true,
                    false,
                )
            }
            StepKind::LoopNodes(p) => {
                let over = LoopOver::Nodes {
                    selector: p.selector.text().into_owned(),
                    run_on: Default::default(),
                };
                let kind = NodeKind::LoopStart {
                    over,
                    max_parallel: p.max_parallel,
                    end: end_id.clone(),
                };
                if p.drain.is_some() || p.gate.is_some() {
                    return self.maintained_loop(step, scope, kind, p);
                }
                self.body_compound(step, scope, kind, Placement::Api, &p.steps, true, true)
            }
            StepKind::Retry(p) => {
                let kind = NodeKind::RetryStart {
                    attempts: p.attempts,
                    backoff_seconds: p.backoff_seconds,
                    end: end_id.clone(),
                };
                self.body_compound(
                    step,
                    scope,
                    kind,
                    Placement::Controller,
                    &p.steps,
                    false,
                    false,
                )
            }
            StepKind::Parallel(p) => {
                let fork = self.node(
                    step,
                    scope,
                    NodeKind::Fork {
                        end: end_id.clone(),
                    },
                    Placement::Structure,
                );
                let mut branches = Vec::new();
                for (b, branch) in p.steps.iter().enumerate() {
                    let bscope = self.inner(
                        scope,
                        &end_id,
                        &format!("steps[{b}]"),
                        &format!("b{b}"),
                        None,
                        false,
                    );
                    let f = self.list(branch, &bscope);
                    self.g.add_edge(fork, f.entry, EdgeKind::Branch);
                    branches.push(f);
                }
                let end = self.end_node(step, scope, compound_end(&id, p.wait_for_all, None));
                for f in branches {
                    self.connect(&f.exits, end);
                }
                (fork, end)
            }
            StepKind::Include(_) => {
                let kind = NodeKind::Include {
                    end: end_id.clone(),
                };
                self.fetched_compound(step, scope, kind)
            }
            StepKind::IncludeFlow(p) => {
                let kind = NodeKind::IncludeFlow {
                    flow: step.name.clone().unwrap_or_default(),
                    namespace: p.namespace.clone(),
                    inherit_vars: p.inherit_vars,
                    end: end_id.clone(),
                };
                self.fetched_compound(step, scope, kind)
            }
            _ => {
                let params = step.kind.params();
                let placement = params.placement(scope.on_node);
                match params
                    .node_targeting()
                    .filter(|_| placement == Placement::Node && !scope.on_node)
                {
                    // A node step outside loopNodes fans out over the nodes it selects.
                    Some((selector, run_on)) => {
                        let over = LoopOver::Nodes {
                            selector: selector.text().into_owned(),
                            run_on,
                        };
                        let start = self.node(
                            step,
                            scope,
                            NodeKind::LoopStart {
                                over,
                                max_parallel: None,
                                end: end_id.clone(),
                            },
                            Placement::Api,
                        );
                        self.g[start].step_type = format!("{}-nodes", step.kind.type_name());
                        let mut action_scope =
                            self.inner(scope, &end_id, "", "node", Some(&id), true);
                        action_scope.path = scope.path.clone();
                        let action =
                            self.node(step, &action_scope, NodeKind::Action, Placement::Node);
                        self.g[action].continue_on_error = false;
                        let end = self.end_node(step, scope, compound_end(&id, true, Some(run_on)));
                        self.g.add_edge(start, action, EdgeKind::Body);
                        self.g.add_edge(action, end, EdgeKind::Next);
                        (start, end)
                    }
                    None => {
                        let n = self.node(step, scope, NodeKind::Action, placement);
                        (n, n)
                    }
                }
            }
        }
    }

    /// `include`/`includeFlow`: a fetch Job, then (once fetched) the steps it brought, at
    /// `<path>.included`.
    fn fetched_compound(
        &mut self,
        step: &Step,
        scope: &Scope,
        kind: NodeKind,
    ) -> (NodeIndex, NodeIndex) {
        match self.expansions.get(&scope.id_prefix) {
            Some(body) => self.body_compound_at(
                step,
                scope,
                kind,
                Placement::Api,
                body,
                "included",
                false,
                false,
            ),
            None => self.opaque_compound(step, scope, kind, Placement::Api),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn body_compound(
        &mut self,
        step: &Step,
        scope: &Scope,
        kind: NodeKind,
        placement: Placement,
        body: &[Step],
        is_loop: bool,
        on_node: bool,
    ) -> (NodeIndex, NodeIndex) {
        self.body_compound_at(
            step, scope, kind, placement, body, "steps", is_loop, on_node,
        )
    }

    /// A start node, `body` (at `<path>.<field>`) and an end node.
    #[allow(clippy::too_many_arguments)]
    fn body_compound_at(
        &mut self,
        step: &Step,
        scope: &Scope,
        kind: NodeKind,
        placement: Placement,
        body: &[Step],
        field: &str,
        is_loop: bool,
        on_node: bool,
    ) -> (NodeIndex, NodeIndex) {
        let id = scope.id_prefix.clone();
        let end_id = format!("{id}-end");
        let start = self.node(step, scope, kind, placement);
        let inner = self.inner(
            scope,
            &end_id,
            field,
            "",
            is_loop.then_some(id.as_str()),
            on_node,
        );
        let f = self.list(body, &inner);
        let end = self.end_node(
            step,
            scope,
            NodeKind::CompoundEnd {
                start: id.clone(),
                wait_for_all: true,
                run_on: None,
            },
        );
        self.g.add_edge(start, f.entry, EdgeKind::Body);
        self.connect(&f.exits, end);
        (start, end)
    }

    fn opaque_compound(
        &mut self,
        step: &Step,
        scope: &Scope,
        kind: NodeKind,
        placement: Placement,
    ) -> (NodeIndex, NodeIndex) {
        let id = scope.id_prefix.clone();
        let start = self.node(step, scope, kind, placement);
        let end = self.end_node(
            step,
            scope,
            NodeKind::CompoundEnd {
                start: id,
                wait_for_all: true,
                run_on: None,
            },
        );
        self.g.add_edge(start, end, EdgeKind::Body);
        (start, end)
    }
}
