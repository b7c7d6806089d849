//! Views of a plan for people and tools: an indented tree, Graphviz DOT, Mermaid, and JSON
//! (`{nodes: [{id, type, ...}], edges: [{from, to, kind}]}`).

use std::fmt::Write;

use serde_json::{json, Value};

use crate::plan::{EdgeKind, LoopOver, NodeKind, Plan, PlanNode};

/// Output formats of `pseudoflow-compile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// An indented tree with each node's type and placement, for a terminal.
    Tree,
    /// Graphviz, to draw the DAG.
    Dot,
    /// Mermaid, to draw the DAG in Markdown (GitHub renders it).
    Mermaid,
    /// The plan as JSON, for tools.
    Json,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tree" => Ok(Format::Tree),
            "dot" => Ok(Format::Dot),
            "mermaid" => Ok(Format::Mermaid),
            "json" => Ok(Format::Json),
            other => Err(format!(
                "unknown format {other:?}: use tree, dot, mermaid or json"
            )),
        }
    }
}

/// Renders `plan` (and the onDelete plan, if any) in `format`.
pub fn render(title: &str, plan: &Plan, on_delete: Option<&Plan>, format: Format) -> String {
    match format {
        Format::Tree => {
            let mut s = tree(title, plan);
            if let Some(d) = on_delete {
                s.push_str(&tree(&format!("{title} (onDelete)"), d));
            }
            s
        }
        Format::Dot => dot(title, plan, on_delete),
        Format::Mermaid => mermaid(plan, on_delete),
        Format::Json => {
            let mut v = to_json(plan);
            if let Some(d) = on_delete {
                v["onDelete"] = to_json(d);
            }
            serde_json::to_string_pretty(&v).expect("plan serialises") + "\n"
        }
    }
}

/// The plan as `{nodes, edges}`.
pub fn to_json(plan: &Plan) -> Value {
    let nodes: Vec<Value> = plan
        .nodes()
        .map(|n| serde_json::to_value(n).expect("node serialises"))
        .collect();
    let order = |id: &str| plan.index(id).map(|i| i.index()).unwrap_or(usize::MAX);
    let mut edges: Vec<(&str, &str, crate::plan::EdgeKind)> = plan.edges().collect();
    edges.sort_by_key(|(from, to, _)| (order(from), order(to)));
    let edges: Vec<Value> = edges
        .into_iter()
        .map(|(from, to, kind)| json!({"from": from, "to": to, "kind": kind}))
        .collect();
    json!({"nodes": nodes, "edges": edges})
}

fn detail(n: &PlanNode) -> String {
    let mut d = match &n.kind {
        NodeKind::LoopStart {
            over: LoopOver::Items(items),
            max_parallel,
            ..
        } => {
            format!(
                "forEach={} maxParallel={}",
                compact(items),
                max_parallel.unwrap_or(1)
            )
        }
        NodeKind::LoopStart {
            over: LoopOver::Nodes { selector, run_on },
            max_parallel,
            ..
        } => {
            let par = max_parallel.map(|m| m.to_string()).unwrap_or_else(|| {
                if n.step_type == "loopNodes" {
                    "1".into()
                } else {
                    "all".into()
                }
            });
            format!("nodes={selector:?} runOn={run_on:?} maxParallel={par}")
        }
        NodeKind::RetryStart {
            attempts,
            backoff_seconds,
            ..
        } => format!("attempts={attempts} backoff={backoff_seconds}s"),
        NodeKind::CompoundEnd {
            wait_for_all: false,
            ..
        } => "first branch wins".into(),
        NodeKind::IncludeFlow {
            flow, inherit_vars, ..
        } => format!("flow={flow} inheritVars={inherit_vars}"),
        _ => String::new(),
    };
    if let Some(why) = &n.in_controller {
        // Run by the controller as the flow's ServiceAccount: no Job, no pod.
        let _ = write!(d, " inController=({why})");
    }
    if let Some(head) = &n.segment {
        // Fused: this step runs in the Job its segment's head launches.
        let _ = write!(d, " sharedJob={head}");
    }
    if n.continue_on_error {
        d.push_str(" continueOnError");
    }
    if let Some(t) = n.timeout_seconds {
        let _ = write!(d, " timeout={t}s");
    }
    d.trim().to_string()
}

fn compact(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.len() > 40 {
        format!(
            "{}…",
            &s[..s.char_indices().nth(40).map(|(i, _)| i).unwrap_or(s.len())]
        )
    } else {
        s
    }
}

fn placement_word(n: &PlanNode) -> &'static str {
    use pseudoflow_crd::steps::Placement::*;
    match (crate::lower::task_of(n), n.placement) {
        (Some(_), _) if n.in_controller.is_some() => "controller",
        (Some(_), Node) => "job@node",
        (Some(_), _) => "job",
        (None, Controller) => "controller",
        (None, _) => "-",
    }
}

fn tree(title: &str, plan: &Plan) -> String {
    let mut out = format!("{title}\n");
    for n in plan.nodes() {
        let failure: Vec<String> = plan
            .outgoing(&n.id)
            .into_iter()
            .filter(|(_, k)| *k == EdgeKind::OnFailure)
            .map(|(to, _)| format!("onFailure→{to}"))
            .collect();
        let label = n
            .name
            .as_deref()
            .map(|s| format!(" \"{s}\""))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}{:<width$} {:<14} {:<10} {}{} {}",
            "  ".repeat(n.depth),
            n.id,
            n.step_type,
            placement_word(n),
            detail(n),
            label,
            failure.join(" "),
            width = 22usize.saturating_sub(2 * n.depth).max(n.id.len()),
        );
    }
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn dot(title: &str, plan: &Plan, on_delete: Option<&Plan>) -> String {
    let mut s = format!(
        "digraph {:?} {{\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n",
        title
    );
    for p in std::iter::once(plan).chain(on_delete) {
        let dot_node = |s: &mut String, n: &PlanNode, indent: &str| {
            let shape = match n.kind {
                NodeKind::Start | NodeKind::End => "oval",
                NodeKind::Condition => "diamond",
                NodeKind::Action => "box",
                _ => "hexagon",
            };
            let _ = writeln!(
                s,
                "{indent}{:?} [label={:?}, shape={shape}];",
                n.id,
                format!("{}\n{}", n.id, n.step_type)
            );
        };
        for n in p.nodes() {
            match &n.segment {
                // Steps sharing one Job are drawn in one cluster, where the head appears.
                Some(head) if *head == n.id => {
                    let _ = writeln!(
                        s,
                        "  subgraph {:?} {{\n    label={:?}; style=dashed;",
                        format!("cluster_{head}"),
                        format!("one Job ({head})")
                    );
                    for m in p.segment_members(head).iter().filter_map(|m| p.node(m)) {
                        dot_node(&mut s, m, "    ");
                    }
                    s.push_str("  }\n");
                }
                Some(_) => {}
                None => dot_node(&mut s, n, "  "),
            }
        }
        for (from, to, kind) in p.edges() {
            let style = match kind {
                EdgeKind::OnFailure => ", color=red",
                EdgeKind::Always => ", style=dashed",
                _ => "",
            };
            let _ = writeln!(
                s,
                "  {from:?} -> {to:?} [label={:?}{style}];",
                edge_word(kind)
            );
        }
    }
    s.push_str("}\n");
    s
}

fn mermaid(plan: &Plan, on_delete: Option<&Plan>) -> String {
    let mut s = String::from("flowchart TD\n");
    let mid = |id: &str| id.replace('-', "_");
    for p in std::iter::once(plan).chain(on_delete) {
        let node_line = |s: &mut String, n: &PlanNode, indent: &str| {
            let label = format!("{}<br/>{}", n.id, n.step_type);
            let shape = match n.kind {
                NodeKind::Start | NodeKind::End => format!("([\"{label}\"])"),
                NodeKind::Condition => format!("{{\"{label}\"}}"),
                NodeKind::Action => format!("[\"{label}\"]"),
                _ => format!("{{{{\"{label}\"}}}}"),
            };
            let _ = writeln!(s, "{indent}{}{shape}", mid(&n.id));
        };
        for n in p.nodes() {
            match &n.segment {
                // Steps sharing one Job are drawn in one subgraph, where the head appears.
                Some(head) if *head == n.id => {
                    let _ = writeln!(s, "  subgraph job_{}[\"one Job ({head})\"]", mid(head));
                    for m in p.segment_members(head).iter().filter_map(|m| p.node(m)) {
                        node_line(&mut s, m, "    ");
                    }
                    s.push_str("  end\n");
                }
                Some(_) => {}
                None => node_line(&mut s, n, "  "),
            }
        }
        for (from, to, kind) in p.edges() {
            let _ = writeln!(s, "  {} -->|{}| {}", mid(from), edge_word(kind), mid(to));
        }
    }
    s
}

fn edge_word(k: EdgeKind) -> &'static str {
    match k {
        EdgeKind::Next => "next",
        EdgeKind::Always => "always",
        EdgeKind::OnFailure => "onFailure",
        EdgeKind::Then => "then",
        EdgeKind::Else => "else",
        EdgeKind::Branch => "branch",
        EdgeKind::Body => "body",
    }
}
