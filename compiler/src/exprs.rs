//! Expressions in a whole flow: compile-time checks of every `${...}` (syntax, and names that no
//! variable, step output or loop provides), and preparing a node's payload at run time
//! (substitution, template rendering, `patchLabel`'s variable).

use std::collections::BTreeSet;

use pseudoflow_crd::steps::apply::manifest_objects;
use pseudoflow_crd::validate::{join, without_nested_steps};
use pseudoflow_crd::{Diagnostics, PseudoFlowSpec, Step, StepKind};
use serde_json::Value;

use crate::expr::{Engine, ExprRef, Scope, SubstError, Warning};
use crate::plan::PlanNode;

/// Checks the syntax of every expression and the names they use, adding errors and warnings.
pub fn check_expressions(spec: &PseudoFlowSpec, diags: &mut Diagnostics) {
    let engine = Engine::new();
    let mut known: BTreeSet<String> = spec.vars.keys().cloned().collect();
    collect_outputs(&spec.steps, &mut known);
    if let Some(d) = &spec.on_delete {
        collect_outputs(d, &mut known);
    }
    let mut outputs = BTreeSet::new();
    collect_outputs(&spec.steps, &mut outputs);
    if let Some(d) = &spec.on_delete {
        collect_outputs(d, &mut outputs);
    }
    let mut checker = Checker {
        engine: &engine,
        known: &known,
        outputs: &outputs,
        diags,
    };
    checker.steps(&spec.steps, "spec.steps", &[]);
    if let Some(d) = &spec.on_delete {
        checker.steps(d, "spec.onDelete", &[]);
    }
}

/// Every variable some step sets, anywhere in the flow.
fn collect_outputs(steps: &[Step], known: &mut BTreeSet<String>) {
    for step in steps {
        let outs: Vec<&String> = match &step.kind {
            StepKind::Exec(p) => p.var.iter().collect(),
            StepKind::ExecNode(p) => p.var.iter().chain(p.var_per_node.iter()).collect(),
            StepKind::Script(p) => p.var.iter().collect(),
            StepKind::Eval(p) => vec![&p.var],
            StepKind::Template(p) if !p.writes_file() => vec![&p.output],
            _ => vec![],
        };
        known.extend(outs.into_iter().cloned());
        for (_, children) in step.kind.params().children() {
            collect_outputs(children, known);
        }
    }
}

struct Checker<'a> {
    engine: &'a Engine,
    known: &'a BTreeSet<String>,
    /// Variables that steps set at run time (command output, not reviewed text).
    outputs: &'a BTreeSet<String>,
    diags: &'a mut Diagnostics,
}

impl Checker<'_> {
    fn steps(&mut self, steps: &[Step], path: &str, loop_vars: &[&str]) {
        for (i, step) in steps.iter().enumerate() {
            let here = format!("{path}[{i}]");
            let raw = without_nested_steps(&serde_json::to_value(step).expect("steps serialise"));
            match &step.kind {
                StepKind::Template(p) => {
                    let field = join(&here, "template");
                    match self.engine.check_template(&p.template, &field) {
                        Err(e) => self.diags.error(field, e.reason),
                        Ok(names) => self.unknown(&field, &names, false, loop_vars, "{{ }}"),
                    }
                }
                StepKind::Eval(p) => {
                    let field = join(&here, "expression");
                    match self.engine.check_eval(&p.expression, &field) {
                        Err(e) => self.diags.error(field, e.reason),
                        Ok(r) => self.unknown(&field, &r.names, false, loop_vars, &r.expr),
                    }
                }
                StepKind::PatchLabel(p) if !self.known.contains(&p.from_var) => {
                    self.diags.error(
                        join(&here, "fromVar"),
                        format!("no step sets variable {:?}", p.from_var),
                    );
                }
                _ => {}
            }
            self.strings(&raw, &here, loop_vars, &step.kind);
            let node_scope = matches!(step.kind, StepKind::LoopNodes(_))
                || step.kind.params().node_targeting().is_some();
            let item_scope = matches!(step.kind, StepKind::Loop(_));
            for (field, children) in step.kind.params().children() {
                let mut vars = loop_vars.to_vec();
                if item_scope {
                    vars.extend(["item", "index"]);
                }
                if node_scope {
                    vars.push("node");
                }
                self.steps(children, &join(&here, &field), &vars);
            }
        }
    }

    fn strings(&mut self, v: &Value, path: &str, loop_vars: &[&str], kind: &StepKind) {
        match v {
            Value::String(s) => {
                let skip = (matches!(kind, StepKind::Template(_)) && path.ends_with(".template"))
                    || (matches!(kind, StepKind::Eval(_)) && path.ends_with(".expression"));
                if skip {
                    return;
                }
                let mut vars = loop_vars.to_vec();
                if kind.params().node_targeting().is_some() {
                    vars.push("node");
                }
                let segments = match crate::expr::scan(s) {
                    Ok(segs) => segs,
                    Err(e) => return self.diags.error(path, e.to_string()),
                };
                // Each expression on its own, so one syntax error does not hide the others.
                for seg in segments {
                    let crate::expr::Segment::Expr(text) = seg else {
                        continue;
                    };
                    match self.engine.check(&format!("${{{text}}}"), path) {
                        Err(e) => self.diags.error(
                            path,
                            format!("invalid expression ${{{text}}}: {}", e.reason),
                        ),
                        Ok(refs) => {
                            for ExprRef { expr, plain, names } in refs {
                                if is_shell_field(kind, path) {
                                    self.unquoted_output(path, &expr, &names);
                                }
                                self.unknown(path, &names, plain, &vars, &expr);
                            }
                        }
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.strings(item, &format!("{path}[{i}]"), loop_vars, kind);
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    if k != "type" {
                        self.strings(item, &join(path, k), loop_vars, kind);
                    }
                }
            }
            _ => {}
        }
    }

    /// Warns when a step's output is spliced into a shell command without `| shq`: the output
    /// is data a command printed, and unquoted it is parsed as shell syntax.
    fn unquoted_output(&mut self, path: &str, expr: &str, names: &[String]) {
        if crate::expr::is_quoted(expr) {
            return;
        }
        let Some(out) = names.iter().find(|n| self.outputs.contains(*n)) else {
            return;
        };
        self.diags.warning(
            path,
            format!(
                "${{{}}} splices step output {out:?} into a shell command unquoted; write \
                 ${{ {} | shq }} to pass it as one word",
                expr.trim(),
                expr.trim()
            ),
        );
    }

    fn unknown(
        &mut self,
        path: &str,
        names: &[String],
        plain: bool,
        loop_vars: &[&str],
        expr: &str,
    ) {
        let unknown: Vec<&String> = names
            .iter()
            .filter(|n| {
                !self.known.contains(*n) && !loop_vars.contains(&n.as_str()) && !is_builtin(n)
            })
            .collect();
        if unknown.is_empty() {
            return;
        }
        if plain {
            self.diags.warning(path, format!("${{{expr}}} is not a flow variable; it is left as is (e.g. for the shell); write $${{{expr}}} to say so"));
        } else {
            let list: Vec<String> = unknown.iter().map(|n| format!("{n:?}")).collect();
            let loops = if loop_vars.is_empty() {
                String::new()
            } else {
                format!(", loop variables {}", loop_vars.join(", "))
            };
            self.diags.error(
                path,
                format!(
                    "{} uses unknown variable {} (known: spec.vars, step outputs{loops})",
                    expr.trim(),
                    list.join(", ")
                ),
            );
        }
    }
}

/// `cmd` of `exec`/`execNode` and `code` of `script`: text a shell parses.
fn is_shell_field(kind: &StepKind, path: &str) -> bool {
    match kind {
        StepKind::Exec(_) | StepKind::ExecNode(_) => path.ends_with(".cmd"),
        StepKind::Script(_) => path.ends_with(".code"),
        _ => false,
    }
}

fn is_builtin(name: &str) -> bool {
    matches!(
        name,
        "json" | "range" | "dict" | "namespace" | "true" | "false" | "none" | "loop"
    )
}

/// The node's payload as it will run, given the scope: `${...}` substituted, a `template`
/// rendered, `patchLabel`'s variable attached as `fromVarValue`.
pub fn prepare_payload(
    engine: &Engine,
    node: &PlanNode,
    scope: &Scope,
) -> Result<(Value, Vec<Warning>), SubstError> {
    let mut payload = crate::lower::payload(node);
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
    let (mut value, warnings) = engine.substitute(&payload, scope, &node.path)?;
    if let Some(obj) = value.as_object_mut() {
        if let Some(t) = template {
            obj.insert("template".into(), Value::String(t));
        }
        if let Some(StepKind::PatchLabel(p)) = node.step.as_ref().map(|s| &s.kind) {
            obj.insert(
                "fromVarValue".into(),
                scope.get(&p.from_var).cloned().unwrap_or(Value::Null),
            );
        }
    }
    Ok((value, warnings))
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
    match prepare_payload(&engine, node, &scope) {
        Ok((v, _)) => v,
        Err(_) => crate::lower::payload(node),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{compile, Compiled, FlowId};

    fn flow(steps: Value) -> Compiled {
        let id = FlowId {
            name: "f",
            namespace: Some("ns"),
        };
        compile(&id, &json!({"vars": {"name": "n1"}, "steps": steps})).expect("valid flow")
    }

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
        let (payload, _) = prepare_payload(&Engine::new(), node, &scope).unwrap();
        let objects = manifest_objects(&payload["manifests"]).unwrap();
        assert_eq!(objects.len(), 1, "{objects:?}");
        assert_eq!(objects[0]["data"]["k"], json!(injected));
        assert_eq!(
            objects[0]["data"]["n"],
            json!(3),
            "a whole-scalar expression keeps its type"
        );
    }

    fn warnings(c: &Compiled) -> Vec<String> {
        c.warnings
            .warnings()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect()
    }

    #[test]
    fn a_step_output_spliced_unquoted_into_a_command_warns() {
        let c = flow(json!([
            {"type": "exec", "cmd": "hostname", "var": "out"},
            {"type": "exec", "cmd": "echo ${out} ${name}"},
            {"type": "exec", "cmd": "echo ${ out | shq } ${name}"},
            {"type": "log", "message": "got ${out}"}
        ]));
        let w = warnings(&c);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("spec.steps[1].cmd: ${out} splices step output \"out\"")
                && w[0].contains("${ out | shq }"),
            "{w:?}"
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
