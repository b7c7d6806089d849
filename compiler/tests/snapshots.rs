//! Snapshot tests: the DAG of every example, the Jobs and ConfigMaps its nodes lower to, and
//! the diagnostics of a set of broken flows. Snapshots live in the top-level `snapshots/`.

mod common;

use common::*;
use pseudoflow_compiler::emit::{emit_node, to_yaml};
use pseudoflow_compiler::lower::{task_of, LowerOptions};
use pseudoflow_compiler::render::{render, Format};
use pseudoflow_compiler::{compile, FlowId};

fn compile_doc(doc: &pseudoflow_compiler::source::FlowDocument) -> pseudoflow_compiler::Compiled {
    let id = FlowId {
        name: &doc.name,
        namespace: doc.namespace.as_deref(),
    };
    compile(&id, doc.spec()).unwrap_or_else(|d| panic!("{} does not compile:\n{d}", doc.name))
}

#[test]
fn every_example_compiles_to_the_reviewed_dag() {
    for path in examples() {
        let doc = load_one(&path);
        let c = compile_doc(&doc);
        let text = format!(
            "{}\n{}",
            render(&doc.name, &c.plan, c.on_delete.as_ref(), Format::Tree),
            render(&doc.name, &c.plan, c.on_delete.as_ref(), Format::Json)
        );
        insta::with_settings!({snapshot_path => "../../snapshots/dag", prepend_module_to_snapshot => false, omit_expression => true}, {
            insta::assert_snapshot!(snapshot_name(&path), text);
        });
    }
}

#[test]
fn every_example_lowers_to_the_reviewed_jobs() {
    let opts = LowerOptions {
        image: "pseudoflow/runtime:test".into(),
        ..Default::default()
    };
    for path in examples() {
        let doc = load_one(&path);
        let c = compile_doc(&doc);
        let flow = flow_ref(&doc, c.spec.service_account_name.as_deref());
        let mut out = String::new();
        // One Job per segment: a fused step runs in its segment head's Job.
        for node in c
            .plan
            .nodes()
            .filter(|n| task_of(n).is_some() && c.plan.job_node(n) == n.id)
        {
            let lowered = emit_node(&c, &flow, &node.id, "worker-0", &opts).unwrap();
            out.push_str(&format!("# node {}\n{}", node.id, to_yaml(&lowered)));
        }
        if out.is_empty() {
            out.push_str("# no node of this flow runs in a Job\n");
        }
        insta::with_settings!({snapshot_path => "../../snapshots/jobs", prepend_module_to_snapshot => false, omit_expression => true}, {
            insta::assert_snapshot!(snapshot_name(&path), out);
        });
    }
}

#[test]
fn broken_flows_get_the_reviewed_diagnostics() {
    for path in yaml_files("compiler/tests/invalid") {
        let doc = load_one(&path);
        let id = FlowId {
            name: &doc.name,
            namespace: doc.namespace.as_deref(),
        };
        let mut diags = compile(&id, doc.spec()).expect_err("a broken flow must not compile");
        doc.locate(&mut diags);
        diags.0.sort_by_key(|d| d.line);
        insta::with_settings!({snapshot_path => "../../snapshots/diagnostics", prepend_module_to_snapshot => false, omit_expression => true}, {
            insta::assert_snapshot!(snapshot_name(&path), diags.to_string());
        });
    }
}
