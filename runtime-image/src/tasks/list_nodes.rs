//! `Task::ListNodes`: the nodes a `loopNodes` selector (or a node step's `nodeSelector`) picks,
//! sorted by name; `runOn: first` keeps only the first.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use pseudoflow_crd::common::RunOn;
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::selector::{LabelSelector, Selector};
use pseudoflow_crd::{Step, StepKind};

use crate::context::ExecCtx;
use crate::error::{Call, StepError};

/// The selector (string or structured form) and node policy of a step that fans out over nodes.
pub fn targeting(step: &Step) -> Result<(LabelSelector, RunOn), StepError> {
    if let StepKind::LoopNodes(s) = &step.kind {
        return Ok((s.selector.clone(), RunOn::All));
    }
    step.kind
        .params()
        .node_targeting()
        .map(|(sel, on)| (sel.clone(), on))
        .ok_or_else(|| {
            StepError::input(format!(
                "task listNodes needs loopNodes or a node step with nodeSelector, got {}",
                step.kind.type_name()
            ))
        })
}

/// Picks the sorted names of nodes whose labels match; `first` keeps one.
pub fn pick(
    mut nodes: Vec<(String, std::collections::BTreeMap<String, String>)>,
    sel: &Selector,
    on: RunOn,
) -> Vec<String> {
    nodes.retain(|(_, labels)| sel.matches(labels));
    let mut names: Vec<String> = nodes.into_iter().map(|(n, _)| n).collect();
    names.sort();
    if on == RunOn::First {
        names.truncate(1);
    }
    names
}

/// Lists the matching nodes.
pub async fn run(ctx: &ExecCtx, step: &Step) -> Result<StepResult, StepError> {
    let (selector, on) = targeting(step)?;
    let sel = selector
        .parse()
        .map_err(|e| StepError::failed(e.to_string()))?;
    let api: Api<Node> = Api::all(ctx.client().await?);
    let lp = ListParams::default().labels(&sel.to_string());
    let call = Call {
        verb: "list",
        resource: "nodes",
        name: "",
        namespace: None,
    };
    let list = api.list(&lp).await.map_err(|e| ctx.api_err(e, call))?;
    let nodes = list
        .items
        .into_iter()
        .map(|n| {
            (
                n.metadata.name.unwrap_or_default(),
                n.metadata.labels.unwrap_or_default(),
            )
        })
        .collect();
    let names = pick(nodes, &sel, on);
    let mut r = StepResult::succeeded(
        false,
        format!("{} nodes match {:?}", names.len(), selector.text()),
    );
    r.nodes = Some(names);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node(name: &str, labels: &[(&str, &str)]) -> (String, BTreeMap<String, String>) {
        (
            name.into(),
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn picks_sorted_matching_nodes() {
        let nodes = vec![
            node("w2", &[("role", "worker")]),
            node("cp", &[("node-role.kubernetes.io/control-plane", "")]),
            node("w1", &[("role", "worker")]),
        ];
        let sel = Selector::parse("!node-role.kubernetes.io/control-plane").unwrap();
        assert_eq!(pick(nodes.clone(), &sel, RunOn::All), vec!["w1", "w2"]);
        assert_eq!(pick(nodes.clone(), &sel, RunOn::First), vec!["w1"]);
        assert_eq!(
            pick(nodes, &Selector::default(), RunOn::Any),
            vec!["cp", "w1", "w2"]
        );
    }

    #[test]
    fn targeting_reads_loop_nodes_and_node_selectors() {
        let s: Step = serde_json::from_value(serde_json::json!(
            {"type": "loopNodes", "selector": "role=worker", "steps": []}))
        .unwrap();
        assert_eq!(targeting(&s).unwrap(), ("role=worker".into(), RunOn::All));
        let s: Step = serde_json::from_value(serde_json::json!(
            {"type": "execNode", "cmd": "id", "runOn": "first"}))
        .unwrap();
        assert_eq!(targeting(&s).unwrap(), ("".into(), RunOn::First));
        let s: Step =
            serde_json::from_value(serde_json::json!({"type": "log", "message": "x"})).unwrap();
        assert!(targeting(&s).is_err());
    }
}
