//! The compiled form of a flow: a DAG whose nodes are step executions and whose edges say when
//! the next node may start. The controller walks it; this module holds no behaviour beyond
//! lookups, so the walk's rules live in one place (`docs/dag.md`).

use std::collections::BTreeMap;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use pseudoflow_crd::common::RunOn;
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::{Step, StepKind};
use serde::Serialize;
use serde_json::Value;

/// Why an edge exists, and so when the controller follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EdgeKind {
    /// Sequence: taken when the source succeeded.
    Next,
    /// Sequence after a `continueOnError` step: taken whether the source succeeded or failed.
    Always,
    /// To an `onError` handler: taken only when the source failed.
    OnFailure,
    /// From a condition to `then` (or to the step a `when` guards): taken when it holds.
    Then,
    /// From a condition to `else` (or past the guarded step): taken when it does not hold.
    Else,
    /// From a parallel fork to one branch.
    Branch,
    /// From a loop, retry or include start into its body (instantiated per item/attempt).
    Body,
}

/// What a node does.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum NodeKind {
    /// Entry of the whole flow.
    Start,
    /// Exit of the whole flow.
    End,
    /// A leaf step: its work runs where `placement` says.
    Action,
    /// Evaluates the condition of `if`/`when` (an API read, so a Job).
    Condition,
    /// Opens a `loop` (items from `forEach`) or a node loop (nodes from a selector).
    LoopStart {
        /// What the loop iterates over.
        over: LoopOver,
        /// How many items may run at once (None: the step type's default).
        #[serde(skip_serializing_if = "Option::is_none")]
        max_parallel: Option<u32>,
        /// The loop's end node.
        end: String,
    },
    /// Opens a `parallel`.
    Fork {
        /// The join node the branches meet at.
        end: String,
    },
    /// Opens a `retry` group.
    RetryStart {
        /// How many times the body may run.
        attempts: u32,
        /// Seconds to wait before the next attempt.
        backoff_seconds: u32,
        /// The group's end node.
        end: String,
    },
    /// Fetches an `include` source; its steps (if any) are compiled and run as its body.
    Include {
        /// The end node the fetched body runs before.
        end: String,
    },
    /// Runs another flow's steps as its body.
    IncludeFlow {
        /// The other flow's name.
        flow: String,
        /// Its namespace (None: the including flow's).
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        /// Whether the included steps see the caller's variables too.
        inherit_vars: bool,
        /// The end node the included body runs before.
        end: String,
    },
    /// Closes a compound step; its failure is the compound's failure.
    CompoundEnd {
        /// The start node this end closes.
        start: String,
        /// For a parallel join: false = the first successful branch is enough.
        wait_for_all: bool,
        /// For a node fan-out: how many nodes must succeed.
        #[serde(skip_serializing_if = "Option::is_none")]
        run_on: Option<RunOn>,
    },
}

/// What a loop iterates over.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LoopOver {
    /// `loop.forEach`: a list or one `${expression}` producing one.
    Items(Value),
    /// `loopNodes` or a node step's fan-out: nodes matching a label selector.
    Nodes {
        /// The label selector the nodes must match.
        selector: String,
        /// On how many of them the body must succeed.
        run_on: RunOn,
    },
}

/// One node of the DAG.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanNode {
    /// Stable, readable id derived from the step path (`s3-then0`); unique in the plan.
    pub id: String,
    /// Path of the step in the resource (`spec.steps[3].then[0]`).
    pub path: String,
    /// The step's `type`, or `start`/`end`/`<type>-end` for structural nodes.
    #[serde(rename = "type")]
    pub step_type: String,
    /// The step's `name`, shown in status and Events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the node does in the DAG.
    #[serde(flatten)]
    pub kind: NodeKind,
    /// Where the work runs (controller, an API Job, a node-pinned Job, or nowhere).
    pub placement: Placement,
    /// Id of the innermost enclosing compound's end node: where an unhandled failure goes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Ids of the enclosing loop starts, outermost first: the dimensions of instance keys.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loops: Vec<String>,
    /// Inside a node loop (or fan-out): the node comes from the loop's item.
    pub on_node: bool,
    /// A failure of this step does not fail the run (`continueOnError`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub continue_on_error: bool,
    /// The step's own `timeoutSeconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// The step itself (parameters not yet substituted), for nodes that do work.
    #[serde(skip)]
    pub step: Option<Step>,
    /// Nesting depth, for the tree view.
    #[serde(skip)]
    pub depth: usize,
    /// For a step fused with its neighbours (`crate::fuse`): the id of the segment's first
    /// node, whose Job runs every member in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<String>,
    /// For an API step the controller runs itself as the flow's ServiceAccount, instead of an
    /// executor Job (`crate::placement`): why it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_controller: Option<String>,
}

impl PlanNode {
    /// The type-specific part of the node's step, for nodes that do work: what the registry's
    /// per-type hooks are asked about.
    pub fn step_kind(&self) -> Option<&StepKind> {
        self.step.as_ref().map(|s| &s.kind)
    }
}

/// A compiled flow.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The DAG: nodes are steps and structural points, edges say when a node may start.
    pub graph: DiGraph<PlanNode, EdgeKind>,
    /// Where every run starts.
    pub start: NodeIndex,
    /// Reached when the run is done.
    pub end: NodeIndex,
    by_id: BTreeMap<String, NodeIndex>,
    segments: BTreeMap<String, Vec<String>>,
    order: Vec<String>,
}

impl Plan {
    pub(crate) fn new(
        graph: DiGraph<PlanNode, EdgeKind>,
        start: NodeIndex,
        end: NodeIndex,
    ) -> Self {
        let by_id = graph
            .node_indices()
            .map(|i| (graph[i].id.clone(), i))
            .collect();
        let mut segments: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for i in graph.node_indices() {
            if let Some(head) = &graph[i].segment {
                segments
                    .entry(head.clone())
                    .or_default()
                    .push(graph[i].id.clone());
            }
        }
        let order = creation_topo_order(&graph);
        Plan {
            graph,
            start,
            end,
            by_id,
            segments,
            order,
        }
    }

    /// Every node id in a topological order that, among ready nodes, prefers the one created
    /// first (the spec's order), so branches start in the order they are written: the order
    /// the walker visits nodes in, computed once here so that only the compiler knows graphs.
    pub fn creation_order(&self) -> &[String] {
        &self.order
    }

    /// The members of the segment `head` leads, in the order they run (empty when `head` is
    /// not a segment's first node).
    pub fn segment_members(&self, head: &str) -> &[String] {
        self.segments.get(head).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Every segment, by head id.
    pub fn segments(&self) -> &BTreeMap<String, Vec<String>> {
        &self.segments
    }

    /// The node whose Job does `node`'s work: the segment's head for a fused step, else the
    /// node itself.
    pub fn job_node<'a>(&'a self, node: &'a PlanNode) -> &'a str {
        node.segment.as_deref().unwrap_or(&node.id)
    }

    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<&PlanNode> {
        self.by_id.get(id).map(|i| &self.graph[*i])
    }

    /// Index of the node with this id.
    pub fn index(&self, id: &str) -> Option<NodeIndex> {
        self.by_id.get(id).copied()
    }

    /// Nodes in creation order, which follows the spec's order.
    pub fn nodes(&self) -> impl Iterator<Item = &PlanNode> {
        self.graph.node_indices().map(|i| &self.graph[i])
    }

    /// Edges as `(from id, to id, kind)`, in creation order.
    pub fn edges(&self) -> impl Iterator<Item = (&str, &str, EdgeKind)> {
        self.graph.edge_references().map(|e| {
            (
                self.graph[e.source()].id.as_str(),
                self.graph[e.target()].id.as_str(),
                *e.weight(),
            )
        })
    }

    /// Incoming edges of a node: what must settle before it can start.
    pub fn incoming(&self, id: &str) -> Vec<(&str, EdgeKind)> {
        self.edges_of(id, Direction::Incoming)
    }

    /// Outgoing edges of a node.
    pub fn outgoing(&self, id: &str) -> Vec<(&str, EdgeKind)> {
        self.edges_of(id, Direction::Outgoing)
    }

    fn edges_of(&self, id: &str, dir: Direction) -> Vec<(&str, EdgeKind)> {
        let Some(i) = self.index(id) else {
            return vec![];
        };
        let mut out: Vec<(&str, EdgeKind)> = self
            .graph
            .edges_directed(i, dir)
            .map(|e| {
                let other = if dir == Direction::Incoming {
                    e.source()
                } else {
                    e.target()
                };
                (self.graph[other].id.as_str(), *e.weight())
            })
            .collect();
        out.reverse();
        out
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.graph.node_count()
    }

    /// A plan always has at least its start and end nodes.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A topological order that, among ready nodes, prefers the one created first (the spec's
/// order), so branches start in the order they are written.
fn creation_topo_order(g: &DiGraph<PlanNode, EdgeKind>) -> Vec<String> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut indegree: Vec<usize> = g
        .node_indices()
        .map(|i| g.neighbors_directed(i, Direction::Incoming).count())
        .collect();
    let mut ready: BinaryHeap<Reverse<usize>> = g
        .node_indices()
        .filter(|i| indegree[i.index()] == 0)
        .map(|i| Reverse(i.index()))
        .collect();
    let mut order = Vec::with_capacity(g.node_count());
    while let Some(Reverse(i)) = ready.pop() {
        let idx = NodeIndex::new(i);
        order.push(g[idx].id.clone());
        for n in g.neighbors_directed(idx, Direction::Outgoing) {
            indegree[n.index()] -= 1;
            if indegree[n.index()] == 0 {
                ready.push(Reverse(n.index()));
            }
        }
    }
    assert_eq!(order.len(), g.node_count(), "plans are acyclic");
    order
}
