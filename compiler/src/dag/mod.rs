//! Lowers a validated step list into the [`Plan`] DAG. Each step becomes a fragment: an entry
//! node, a *unit* node (whose failure is the step's failure: the node itself for a leaf, the end
//! node for a compound) and dangling exits that the next step's entry is wired to.
//!
//! Building also enforces the plan's size ([`Budget`]): steps counted in document order, step
//! depth with included steps in place, and the iterations of literal loops.

use std::collections::BTreeMap;

use petgraph::graph::{DiGraph, NodeIndex};
use pseudoflow_crd::common::RunOn;
use pseudoflow_crd::steps::loop_nodes::LoopNodesStep;
use pseudoflow_crd::steps::parallel::ParallelStep;
use pseudoflow_crd::steps::r#if::IfStep;
use pseudoflow_crd::steps::r#loop::LoopStep;
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{Diagnostics, Step, StepKind};
use serde_json::Value;

use crate::limits::{PlanLimits, MAX_RUN_ITERATIONS, MAX_STEP_DEPTH};
use crate::plan::{EdgeKind, LoopOver, NodeKind, Plan, PlanNode};

mod maintenance;

/// Steps fetched at run time by an `include` or `includeFlow`, by the node id of the step that
/// fetched them. Compiling again with them makes them that step's body; node ids elsewhere do not
/// change, so the run state stays valid.
pub type Expansions = BTreeMap<String, Vec<Step>>;

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
    api_steps: crate::placement::ApiStepsIn,
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
    crate::placement::mark_in_controller(&mut b.g, api_steps);
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
            in_controller: None,
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
            in_controller: None,
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
        if scope.depth > MAX_STEP_DEPTH {
            return self.too_deep(step, scope);
        }
        let end = format!("{}-end", scope.id_prefix);
        match &step.kind {
            StepKind::If(p) => self.if_compound(step, scope, p),
            StepKind::Loop(p) => self.loop_compound(step, scope, p),
            StepKind::LoopNodes(p) => self.loop_nodes_compound(step, scope, p),
            StepKind::Retry(p) => {
                let kind = NodeKind::RetryStart {
                    attempts: p.attempts,
                    backoff_seconds: p.backoff_seconds,
                    end,
                };
                let body = Body::steps(&p.steps);
                self.body_compound(step, scope, kind, Placement::Controller, body)
            }
            StepKind::Parallel(p) => self.parallel_compound(step, scope, p),
            StepKind::Include(_) => self.fetched_compound(step, scope, NodeKind::Include { end }),
            StepKind::IncludeFlow(p) => {
                let kind = NodeKind::IncludeFlow {
                    flow: step.name.clone().unwrap_or_default(),
                    namespace: p.namespace.clone(),
                    inherit_vars: p.inherit_vars,
                    end,
                };
                self.fetched_compound(step, scope, kind)
            }
            _ => self.leaf(step, scope),
        }
    }

    /// A step nested deeper than [`MAX_STEP_DEPTH`] (only included steps get here: validation
    /// bounds the depth of the flow's own): reported once, and built as a leaf so building
    /// never recurses deeper.
    fn too_deep(&mut self, step: &Step, scope: &Scope) -> (NodeIndex, NodeIndex) {
        if !std::mem::replace(&mut self.budget.too_deep, true) {
            self.budget.diags.error(
                scope.path.clone(),
                format!(
                    "steps nested deeper than {MAX_STEP_DEPTH} levels (included steps counted)"
                ),
            );
        }
        let n = self.node(step, scope, NodeKind::Action, Placement::Structure);
        (n, n)
    }

    /// `if`: a condition node, `then` (and `else`) in branches, joined at an end node.
    fn if_compound(&mut self, step: &Step, scope: &Scope, p: &IfStep) -> (NodeIndex, NodeIndex) {
        let end_id = format!("{}-end", scope.id_prefix);
        let cond = self.node(step, scope, NodeKind::Condition, Placement::Api);
        self.g[cond].parent = Some(end_id.clone());
        let then_scope = self.inner(scope, &end_id, "then", "then", None, false);
        let then = self.list(&p.then, &then_scope);
        self.g.add_edge(cond, then.entry, EdgeKind::Then);
        let els = p.else_.as_ref().map(|e| {
            let else_scope = self.inner(scope, &end_id, "else", "else", None, false);
            self.list(e, &else_scope)
        });
        let end = self.compound_end(step, scope, true, None);
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

    /// `loop`: its body once per item; a literal item list counts towards the run's iterations.
    fn loop_compound(
        &mut self,
        step: &Step,
        scope: &Scope,
        p: &LoopStep,
    ) -> (NodeIndex, NodeIndex) {
        let mut scope = scope.clone();
        if let Value::Array(items) = &p.for_each {
            let n = scope.runs.saturating_mul(items.len());
            self.budget.iterations(&scope.path, n);
            scope.runs = n;
        }
        let kind = NodeKind::LoopStart {
            over: LoopOver::Items(p.for_each.clone()),
            max_parallel: p.max_parallel,
            end: format!("{}-end", scope.id_prefix),
        };
        let body = Body::looped(&p.steps, false);
        self.body_compound(step, &scope, kind, Placement::Controller, body)
    }

    /// `loopNodes`: its body once per selected node, around it the drain and gate if it has them.
    fn loop_nodes_compound(
        &mut self,
        step: &Step,
        scope: &Scope,
        p: &LoopNodesStep,
    ) -> (NodeIndex, NodeIndex) {
        let kind = NodeKind::LoopStart {
            over: LoopOver::Nodes {
                selector: p.selector.text().into_owned(),
                run_on: Default::default(),
            },
            max_parallel: p.max_parallel,
            end: format!("{}-end", scope.id_prefix),
        };
        if p.drain.is_some() || p.gate.is_some() {
            return self.maintained_loop(step, scope, kind, p);
        }
        self.body_compound(
            step,
            scope,
            kind,
            Placement::Api,
            Body::looped(&p.steps, true),
        )
    }

    /// `parallel`: a fork into one branch per step list, joined at an end node.
    fn parallel_compound(
        &mut self,
        step: &Step,
        scope: &Scope,
        p: &ParallelStep,
    ) -> (NodeIndex, NodeIndex) {
        let end_id = format!("{}-end", scope.id_prefix);
        let kind = NodeKind::Fork {
            end: end_id.clone(),
        };
        let fork = self.node(step, scope, kind, Placement::Structure);
        let mut branches = Vec::new();
        for (b, branch) in p.steps.iter().enumerate() {
            let field = format!("steps[{b}]");
            let bscope = self.inner(scope, &end_id, &field, &format!("b{b}"), None, false);
            let f = self.list(branch, &bscope);
            self.g.add_edge(fork, f.entry, EdgeKind::Branch);
            branches.push(f);
        }
        let end = self.compound_end(step, scope, p.wait_for_all, None);
        for f in branches {
            self.connect(&f.exits, end);
        }
        (fork, end)
    }

    /// A leaf step: one node where its placement says, except a node step outside `loopNodes`,
    /// which fans out over the nodes it selects.
    fn leaf(&mut self, step: &Step, scope: &Scope) -> (NodeIndex, NodeIndex) {
        let params = step.kind.params();
        let placement = params.placement(scope.on_node);
        match params
            .node_targeting()
            .filter(|_| placement == Placement::Node && !scope.on_node)
        {
            Some((selector, run_on)) => {
                self.fanned_out(step, scope, selector.text().into_owned(), run_on)
            }
            None => {
                let n = self.node(step, scope, NodeKind::Action, placement);
                (n, n)
            }
        }
    }

    /// A node step outside `loopNodes`: a node loop over `selector` around one action, joined
    /// as `run_on` says.
    fn fanned_out(
        &mut self,
        step: &Step,
        scope: &Scope,
        selector: String,
        run_on: RunOn,
    ) -> (NodeIndex, NodeIndex) {
        let id = scope.id_prefix.clone();
        let end_id = format!("{id}-end");
        let kind = NodeKind::LoopStart {
            over: LoopOver::Nodes { selector, run_on },
            max_parallel: None,
            end: end_id.clone(),
        };
        let start = self.node(step, scope, kind, Placement::Api);
        self.g[start].step_type = format!("{}-nodes", step.kind.type_name());
        let mut action_scope = self.inner(scope, &end_id, "", "node", Some(&id), true);
        action_scope.path = scope.path.clone();
        let action = self.node(step, &action_scope, NodeKind::Action, Placement::Node);
        self.g[action].continue_on_error = false;
        let end = self.compound_end(step, scope, true, Some(run_on));
        self.g.add_edge(start, action, EdgeKind::Body);
        self.g.add_edge(action, end, EdgeKind::Next);
        (start, end)
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
            Some(steps) => {
                let body = Body {
                    field: "included",
                    ..Body::steps(steps)
                };
                self.body_compound(step, scope, kind, Placement::Api, body)
            }
            None => self.opaque_compound(step, scope, kind, Placement::Api),
        }
    }

    /// A start node, `body` (at `<path>.<field>`) and an end node.
    fn body_compound(
        &mut self,
        step: &Step,
        scope: &Scope,
        kind: NodeKind,
        placement: Placement,
        body: Body,
    ) -> (NodeIndex, NodeIndex) {
        let id = scope.id_prefix.clone();
        let end_id = format!("{id}-end");
        let start = self.node(step, scope, kind, placement);
        let loop_id = body.is_loop.then_some(id.as_str());
        let inner = self.inner(scope, &end_id, body.field, "", loop_id, body.on_node);
        let f = self.list(body.steps, &inner);
        let end = self.compound_end(step, scope, true, None);
        self.g.add_edge(start, f.entry, EdgeKind::Body);
        self.connect(&f.exits, end);
        (start, end)
    }

    /// A start node and an end node with nothing between them yet (an include not fetched).
    fn opaque_compound(
        &mut self,
        step: &Step,
        scope: &Scope,
        kind: NodeKind,
        placement: Placement,
    ) -> (NodeIndex, NodeIndex) {
        let start = self.node(step, scope, kind, placement);
        let end = self.compound_end(step, scope, true, None);
        self.g.add_edge(start, end, EdgeKind::Body);
        (start, end)
    }

    /// The end node closing the compound step that starts at `scope`'s node: it waits for every
    /// branch (or, unless `wait_for_all`, the first), as `run_on` says for a node fan-out.
    fn compound_end(
        &mut self,
        step: &Step,
        scope: &Scope,
        wait_for_all: bool,
        run_on: Option<RunOn>,
    ) -> NodeIndex {
        let kind = NodeKind::CompoundEnd {
            start: scope.id_prefix.clone(),
            wait_for_all,
            run_on,
        };
        self.end_node(step, scope, kind)
    }
}

/// A compound step's body: its steps and how they sit inside it.
#[derive(Clone, Copy)]
struct Body<'s> {
    steps: &'s [Step],
    /// The field the body is at (`steps`, or `included` for fetched steps).
    field: &'static str,
    /// Whether the body runs once per item: its nodes carry the loop's id in `loops`.
    is_loop: bool,
    /// Whether the body runs on a node (`loopNodes`).
    on_node: bool,
}

impl<'s> Body<'s> {
    /// `steps`, run once.
    fn steps(steps: &'s [Step]) -> Self {
        Body {
            steps,
            field: "steps",
            is_loop: false,
            on_node: false,
        }
    }

    /// `steps`, run once per item (on each node when `on_node`).
    fn looped(steps: &'s [Step], on_node: bool) -> Self {
        Body {
            is_loop: true,
            on_node,
            ..Body::steps(steps)
        }
    }
}
