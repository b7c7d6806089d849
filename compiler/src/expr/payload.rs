//! Preparing a node's payload at run time: `${...}` substituted, a `template` rendered,
//! `patchLabel`'s variable attached, the variables a run-time body may use sent along — what
//! the controller lowers into the step's input.

use pseudoflow_crd::protocol::{Task, BODY_VARS};
use pseudoflow_crd::quoting::ShellQuoting;
use pseudoflow_crd::steps::apply::manifest_objects;
use pseudoflow_crd::steps::Placement;
use pseudoflow_crd::text::join;
use pseudoflow_crd::{PseudoFlowSpec, StepKind};
use serde_json::Value;

use super::{Engine, Scope, SubstError, Warning};
use crate::lower::task_of;
use crate::plan::PlanNode;

/// The node's payload as it will run, given the scope: `${...}` substituted (in shell fields
/// quoted when the flow's `quoting` says so), a `template` rendered, `patchLabel`'s variable
/// attached as `fromVarValue`.
pub fn prepare_payload(
    engine: &Engine,
    node: &PlanNode,
    scope: &Scope,
    quoting: ShellQuoting,
) -> Result<(Value, Vec<Warning>), SubstError> {
    let mut payload = crate::lower::payload(node);
    let shell = match quoting {
        ShellQuoting::Quoted => take_shell_fields(node, &mut payload),
        ShellQuoting::Raw => Vec::new(),
    };
    let template = match &node.step.as_ref().map(|s| &s.kind) {
        Some(StepKind::Template(t)) => {
            Some(engine.render_template(&t.template, scope, &join(&node.path, "template"))?)
        }
        _ => None,
    };
    if let Some(obj) = payload.as_object_mut() {
        obj.remove("template");
        if let Some(StepKind::Apply(_)) = node.step.as_ref().map(|s| &s.kind) {
            parse_manifests(obj, &node.path)?;
        }
    }
    let (mut value, mut warnings) = engine.substitute(&payload, scope, &node.path)?;
    if let Some(obj) = value.as_object_mut() {
        for (field, text) in shell {
            let (v, w) = engine.substitute_shell(&text, scope, &join(&node.path, field))?;
            warnings.extend(w);
            obj.insert(field.to_string(), v);
        }
        if let Some(t) = template {
            obj.insert("template".into(), Value::String(t));
        }
        if let Some(var) = node.step_kind().and_then(|k| k.params().input_var()) {
            obj.insert(
                "fromVarValue".into(),
                scope.get(var).cloned().unwrap_or(Value::Null),
            );
        }
        if reads_body(node) {
            obj.insert(
                BODY_VARS.into(),
                Value::Object(scope.clone().into_iter().collect()),
            );
        }
    }
    Ok((value, warnings))
}

/// The node's shell fields (`cmd`, `code`), taken out of the payload to be substituted with
/// quoting.
fn take_shell_fields(node: &PlanNode, payload: &mut Value) -> Vec<(&'static str, String)> {
    let (Some(kind), Some(obj)) = (node.step_kind(), payload.as_object_mut()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for field in kind.params().shell_fields() {
        if let Some(Value::String(text)) = obj.remove(*field) {
            out.push((*field, text));
        }
    }
    out
}

/// Whether the executor will read a YAML body for this node (see
/// [`pseudoflow_crd::steps::StepParams::reads_body`]): the step's own work (not the node
/// listing that opens a fan-out), and not a node-context `deleteFile`, which deletes a node
/// file and reads none.
fn reads_body(node: &PlanNode) -> bool {
    let works = matches!(task_of(node), Some(Task::Run | Task::FetchInclude));
    works
        && node.placement != Placement::Node
        && node.step_kind().is_some_and(|k| k.params().reads_body())
}

/// `apply.manifests` given as YAML text becomes the list of its objects *before* substitution,
/// so that `${...}` is substituted inside string scalars: a value holding `---` or
/// `kind: ...` stays a string and cannot add objects or fields validation never saw.
fn parse_manifests(
    step: &mut serde_json::Map<String, Value>,
    path: &str,
) -> Result<(), SubstError> {
    let Some(text @ Value::String(_)) = step.get("manifests") else {
        return Ok(());
    };
    let objects = manifest_objects(text).map_err(|reason| SubstError {
        path: join(path, "manifests"),
        expr: "manifests".into(),
        reason,
    })?;
    step.insert("manifests".into(), Value::Array(objects));
    Ok(())
}

/// The node's step as JSON with `spec.vars` substituted where possible (for `--emit`); loop
/// variables and step outputs are unknown before a run, so what cannot be substituted is kept.
pub fn substitute_flow_vars(node: &PlanNode, spec: &PseudoFlowSpec) -> Value {
    let scope: Scope = spec
        .vars
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let engine = Engine::new();
    match prepare_payload(&engine, node, &scope, spec.quoting()) {
        Ok((v, _)) => v,
        Err(_) => crate::lower::payload(node),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_flow as flow;
    use super::*;

    #[test]
    fn a_variable_holding_a_document_separator_stays_a_string_in_apply() {
        let c = flow(json!([{
            "type": "apply",
            "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  k: ${v}\n  n: ${n}\n"
        }]));
        let node = c.plan.nodes().find(|n| n.step_type == "apply").unwrap();
        let injected = "x\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: injected\n";
        let scope: Scope = [
            ("v".to_string(), json!(injected)),
            ("n".to_string(), json!(3)),
        ]
        .into();
        let (payload, _) =
            prepare_payload(&Engine::new(), node, &scope, ShellQuoting::Raw).unwrap();
        let objects = manifest_objects(&payload["manifests"]).unwrap();
        assert_eq!(objects.len(), 1, "{objects:?}");
        assert_eq!(objects[0]["data"]["k"], json!(injected));
        assert_eq!(
            objects[0]["data"]["n"],
            json!(3),
            "a whole-scalar expression keeps its type"
        );
    }

    #[test]
    fn the_run_variables_go_only_to_steps_that_read_a_body() {
        let c = flow(json!([
            {"type": "applyFile", "path": "a.yaml"},
            {"type": "deleteFile", "path": "a.yaml"},
            {"type": "include", "source": {"configMapRef": {"name": "c", "key": "k"}}},
            {"type": "deleteFile", "path": "/etc/x", "nodeSelector": ""},
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m"}}},
        ]));
        let scope: Scope = [("v".to_string(), json!("1"))].into();
        let sent: Vec<(String, bool)> = c
            .plan
            .nodes()
            .filter(|n| n.step.is_some() && n.path.matches('[').count() == 1)
            .map(|n| {
                let (p, _) = prepare_payload(&Engine::new(), n, &scope, ShellQuoting::Raw).unwrap();
                (n.path.clone(), p.get(BODY_VARS) == Some(&json!({"v": "1"})))
            })
            .collect();
        for (path, expected) in [
            ("spec.steps[0]", true),
            ("spec.steps[1]", true),
            ("spec.steps[2]", true),
            ("spec.steps[4]", false),
        ] {
            assert!(
                sent.contains(&(path.to_string(), expected)),
                "{path}: {sent:?}"
            );
        }
        // A node deleteFile deletes a node file and reads no body: none of its nodes get them.
        assert!(
            !sent.contains(&("spec.steps[3]".to_string(), true)),
            "{sent:?}"
        );
    }

    #[test]
    fn a_quoting_flow_quotes_its_shell_fields_and_nothing_else() {
        let c = flow(json!([
            {"type": "exec", "cmd": "echo hi ${name}", "namespace": "${name}"},
            {"type": "script", "code": "echo ${name | raw}"},
        ]));
        let scope: Scope = [("name".to_string(), json!("x; id -u"))].into();
        let run = |path: &str, q| {
            let node = c.plan.nodes().find(|n| n.path == path).unwrap();
            prepare_payload(&Engine::new(), node, &scope, q).unwrap().0
        };
        let exec = run("spec.steps[0]", ShellQuoting::Quoted);
        assert_eq!(exec["cmd"], json!("echo hi 'x; id -u'"));
        assert_eq!(exec["namespace"], json!("x; id -u"), "not a shell field");
        assert_eq!(
            run("spec.steps[1]", ShellQuoting::Quoted)["code"],
            json!("echo x; id -u")
        );
        // A flow written for v1alpha1 splices as it always did.
        assert_eq!(
            run("spec.steps[0]", ShellQuoting::Raw)["cmd"],
            json!("echo hi x; id -u")
        );
    }

    #[test]
    fn shq_quotes_for_the_shell_at_run_time() {
        let scope: Scope = [("out".to_string(), json!("a'b; rm -rf /"))].into();
        let (v, _) = Engine::new()
            .substitute_str("echo ${ out | shq }", &scope, "spec.steps[1].cmd")
            .unwrap();
        assert_eq!(v, json!("echo 'a'\\''b; rm -rf /'"));
    }
}
