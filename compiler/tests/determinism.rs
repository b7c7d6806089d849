//! Compile is pure and deterministic: the same input gives byte-identical plans and Jobs, which
//! is what lets a restarted controller find the Jobs it already created.

mod common;

use common::*;
use pseudoflow_compiler::emit::{emit_node, to_yaml};
use pseudoflow_compiler::lower::{task_of, LowerOptions};
use pseudoflow_compiler::render::{render, Format};
use pseudoflow_compiler::{compile, FlowId};

fn everything(path: &std::path::Path) -> String {
    let doc = load_one(path);
    let id = FlowId {
        name: &doc.name,
        namespace: doc.namespace.as_deref(),
    };
    let c = compile(&id, doc.spec()).unwrap();
    let flow = flow_ref(&doc, None);
    let mut out = render(&doc.name, &c.plan, c.on_delete.as_ref(), Format::Json);
    for n in c.plan.nodes().filter(|n| task_of(n).is_some()) {
        out.push_str(&to_yaml(
            &emit_node(&c, &flow, &n.id, "node-a", &LowerOptions::default()).unwrap(),
        ));
    }
    out
}

#[test]
fn compiling_twice_gives_identical_bytes() {
    for path in examples() {
        assert_eq!(everything(&path), everything(&path), "{}", path.display());
    }
}

#[test]
fn node_ids_and_job_names_are_unique_within_a_flow() {
    for path in examples() {
        let doc = load_one(&path);
        let id = FlowId {
            name: &doc.name,
            namespace: doc.namespace.as_deref(),
        };
        let c = compile(&id, doc.spec()).unwrap();
        let mut ids = std::collections::BTreeSet::new();
        let mut jobs = std::collections::BTreeSet::new();
        for n in c.plan.nodes() {
            assert!(
                ids.insert(n.id.clone()),
                "duplicate node id {} in {}",
                n.id,
                path.display()
            );
            // A fused step runs in its segment head's Job: one Job name per segment.
            if task_of(n).is_some() && c.plan.job_node(n) == n.id {
                let l = emit_node(
                    &c,
                    &flow_ref(&doc, None),
                    &n.id,
                    "node-a",
                    &LowerOptions::default(),
                )
                .unwrap();
                let name = l.job.metadata.name.unwrap();
                assert!(name.len() <= 63, "{name}");
                assert!(jobs.insert(name.clone()), "duplicate Job name {name}");
            }
        }
    }
}
