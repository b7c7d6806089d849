//! Compile-time checks of every `${...}` in a whole flow: syntax, and names that no variable,
//! step output or loop provides — so a typo fails the flow before anything runs; and where
//! tenant data ([`super::taint`]) goes: opted out of quoting in a command (a warning), into a
//! step's image, namespace or node selector (an error unless `spec.allowObjectData` allows it),
//! or into where a step acts ([`super::steering`]).

use std::collections::BTreeSet;

use pseudoflow_crd::quoting::{ObjectDataField, ShellQuoting};
use pseudoflow_crd::text::join;
use pseudoflow_crd::validate::without_nested_steps;
use pseudoflow_crd::{Diagnostics, PseudoFlowSpec, Step, StepKind};
use serde_json::Value;

use super::{Engine, ExprRef};
use crate::Expansions;

/// Checks the syntax of every expression and the names they use, adding errors and warnings.
pub fn check_expressions(spec: &PseudoFlowSpec, diags: &mut Diagnostics) {
    check_with_includes(spec, &Expansions::new(), diags);
}

/// [`check_expressions`] for a flow with the steps its includes fetched (`expansions`, by the
/// including node's id): the included steps are traced for tenant data with
/// the flow, and their commands and pod settings checked as the flow's own are.
pub fn check_with_includes(
    spec: &PseudoFlowSpec,
    expansions: &Expansions,
    diags: &mut Diagnostics,
) {
    let engine = Engine::new();
    let included: Vec<&[Step]> = expansions.values().map(Vec::as_slice).collect();
    let tainted = super::taint::tainted(spec, &included);
    let mut known: BTreeSet<String> = spec.vars.keys().cloned().collect();
    known.extend(spec.bound_vars().iter().map(|v| v.to_string()));
    collect_outputs(&spec.steps, &mut known);
    if let Some(d) = &spec.on_delete {
        collect_outputs(d, &mut known);
    }
    // Data a flow's author does not write: step outputs, and in a bound flow the object and
    // its trigger, written by whoever may create or edit objects of the kind.
    let mut outputs: BTreeSet<String> = spec.bound_vars().iter().map(|v| v.to_string()).collect();
    collect_outputs(&spec.steps, &mut outputs);
    if let Some(d) = &spec.on_delete {
        collect_outputs(d, &mut outputs);
    }
    let mut checker = Checker {
        engine: &engine,
        known: &known,
        outputs: &outputs,
        bound: spec.bound_vars(),
        tainted: &tainted,
        item_tainted: false,
        included: false,
        quoting: spec.quoting(),
        allowed: &spec.allow_object_data,
        step_path: String::new(),
        diags,
    };
    checker.steps(&spec.steps, "spec.steps", &[]);
    if let Some(d) = &spec.on_delete {
        checker.steps(d, "spec.onDelete", &[]);
    }
    // Included steps were checked alone when fetched; here only for tenant data, with the flow.
    checker.included = true;
    for (at, steps) in expansions {
        checker.steps(steps, at, &[]);
    }
    checker.included = false;
    if let Some(bind) = &spec.bind {
        for (key, text) in &bind.status.fields {
            checker.status_field(text, &format!("spec.bind.status.fields.{key}"));
        }
        for (i, r) in bind.related.iter().enumerate() {
            checker.status_field(&r.name, &format!("spec.bind.related[{i}].name"));
            if let Some(ns) = &r.namespace {
                checker.status_field(ns, &format!("spec.bind.related[{i}].namespace"));
            }
        }
    }
}

/// Every variable some step sets, anywhere in the flow.
fn collect_outputs(steps: &[Step], known: &mut BTreeSet<String>) {
    for step in steps {
        known.extend(step.kind.params().outputs().into_iter().map(str::to_string));
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
    /// A bound flow's own variables (`object`, `trigger`): data its author does not write.
    bound: &'static [&'static str],
    /// Variables that can carry tenant data ([`super::taint`]).
    tainted: &'a BTreeSet<String>,
    /// Whether `item` of the innermost loop around the step being checked is tenant data.
    item_tainted: bool,
    /// Checking steps an include fetched: only for tenant data (the rest was checked alone).
    included: bool,
    /// How the flow inserts `${...}` into commands.
    quoting: ShellQuoting,
    /// Pod settings the flow lets object data set (`spec.allowObjectData`).
    allowed: &'a [ObjectDataField],
    /// The path of the step whose fields are being checked.
    step_path: String,
    diags: &'a mut Diagnostics,
}

impl Checker<'_> {
    fn steps(&mut self, steps: &[Step], path: &str, loop_vars: &[&str]) {
        for (i, step) in steps.iter().enumerate() {
            let here = format!("{path}[{i}]");
            let raw = without_nested_steps(&serde_json::to_value(step).expect("steps serialise"));
            if !self.included {
                self.step_fields(step, &here, loop_vars);
            }
            self.step_path.clone_from(&here);
            self.strings(&raw, &here, loop_vars, &step.kind);
            if let StepKind::Apply(p) = &step.kind {
                self.manifest_targets(&p.manifests, &here);
            }
            let outer = self.item_tainted;
            if let StepKind::Loop(_) = step.kind {
                self.item_tainted =
                    super::taint::reads_tainted(self.engine, step, outer, self.tainted);
            }
            self.children(step, &here, loop_vars);
            self.item_tainted = outer;
        }
    }

    /// The step's nested step lists, with the loop and node variables they see.
    fn children(&mut self, step: &Step, here: &str, loop_vars: &[&str]) {
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
            self.steps(children, &join(here, &field), &vars);
        }
    }

    /// A template's, an eval's and a patchLabel's own fields.
    fn step_fields(&mut self, step: &Step, here: &str, loop_vars: &[&str]) {
        match &step.kind {
            StepKind::Template(p) => {
                let field = join(here, "template");
                match self.engine.check_template(&p.template, &field) {
                    Err(e) => self.diags.error(field, e.reason),
                    Ok(names) => self.unknown(&field, &names, false, loop_vars, "{{ }}"),
                }
            }
            StepKind::Eval(p) => {
                let field = join(here, "expression");
                match self.engine.check_eval(&p.expression, &field) {
                    Err(e) => self.diags.error(field, e.reason),
                    Ok(r) => self.unknown(&field, &r.names, false, loop_vars, &r.expr),
                }
            }
            StepKind::PatchLabel(p) if !self.known.contains(&p.from_var) => {
                self.diags.error(
                    join(here, "fromVar"),
                    format!("no step sets variable {:?}", p.from_var),
                );
            }
            _ => {}
        }
    }

    fn strings(&mut self, v: &Value, path: &str, loop_vars: &[&str], kind: &StepKind) {
        match v {
            Value::String(s) => {
                if has_field(kind.params().unsubstituted_fields(), path) {
                    return;
                }
                let mut vars = loop_vars.to_vec();
                // A loopNodes' gate is checked per node: `${node}` is the node just changed.
                let gate = matches!(kind, StepKind::LoopNodes(_)) && path.contains(".gate.");
                if kind.params().node_targeting().is_some() || gate {
                    vars.push("node");
                }
                let segments = match super::scan(s) {
                    Ok(segs) => segs,
                    Err(e) => return self.diags.error(path, e.to_string()),
                };
                // Each expression on its own, so one syntax error does not hide the others.
                for seg in segments {
                    let super::Segment::Expr(text) = seg else {
                        continue;
                    };
                    match self.engine.check(&format!("${{{text}}}"), path) {
                        Err(e) if !self.included => self.diags.error(
                            path,
                            format!("invalid expression ${{{text}}}: {}", e.reason),
                        ),
                        Err(_) => {}
                        Ok(refs) => {
                            for r in refs {
                                self.expression(path, r, &vars, kind);
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

    /// One expression in a step's field: in a command, how it is quoted; in a pod setting,
    /// whether tenant data may set it; everywhere, that its names exist.
    fn expression(&mut self, path: &str, r: ExprRef, vars: &[&str], kind: &StepKind) {
        let ExprRef { expr, plain, names } = r;
        if has_field(kind.params().shell_fields(), path) {
            match self.quoting {
                ShellQuoting::Raw => self.unquoted_output(path, &expr, &names),
                ShellQuoting::Quoted => self.raw_opt_out(path, &expr, &names),
            }
        }
        let relative = path.strip_prefix(self.step_path.as_str()).unwrap_or(path);
        if let Some(field) = ObjectDataField::of_field(relative) {
            self.object_data_setting(path, field, &expr, &names);
        }
        if let Some(steered) = super::steering::steered(kind, relative) {
            if let Some(name) = self.tenant_data(&names) {
                super::steering::check(self.diags, self.allowed, path, steered, &expr, name);
            }
        }
        if !self.included {
            self.unknown(path, &names, plain, vars, &expr);
        }
    }

    /// The tenant data `names` read, if any: a tainted variable, or a loop item over one.
    fn tenant_data<'n>(&self, names: &'n [String]) -> Option<&'n String> {
        names.iter().find(|n| {
            self.tainted.contains(*n)
                || (self.item_tainted && super::taint::ITEM_VARS.contains(&n.as_str()))
        })
    }

    /// Warns when a quoting flow's command opts out (`| raw`) for tenant data: the author
    /// asked for the shell to parse what a tenant wrote.
    fn raw_opt_out(&mut self, path: &str, expr: &str, names: &[String]) {
        if !super::is_raw(expr) {
            return;
        }
        let Some(name) = self.tenant_data(names) else {
            return;
        };
        self.diags.warning(
            path,
            format!(
                "${{{}}} opts out of quoting for {name:?}, tenant data (from the bound \
                 object, written by whoever may edit objects of the kind): the shell parses \
                 what they write; drop `| raw` to pass it as one word",
                expr.trim()
            ),
        );
    }

    /// Refuses a pod setting taken from tenant data unless `spec.allowObjectData` names it.
    /// The object's own namespace is the API server's, not free text (its name too, except as
    /// a namespace).
    fn object_data_setting(
        &mut self,
        path: &str,
        field: ObjectDataField,
        expr: &str,
        names: &[String],
    ) {
        // The object's name is no namespace: a tenant may name an object `kube-system`.
        let own = match expr.trim() {
            "object.metadata.namespace" => true,
            "object.metadata.name" => field != ObjectDataField::Namespace,
            _ => false,
        };
        if own || self.allowed.contains(&field) {
            return;
        }
        let Some(name) = self.tenant_data(names) else {
            return;
        };
        let f = field.field();
        self.diags.error(
            path,
            format!(
                "${{{}}} sets {f} from {name:?}, tenant data (from the bound object, written \
                 by whoever may edit objects of the kind); write a fixed {f}, or allow it with \
                 spec.allowObjectData: [{f}]",
                expr.trim()
            ),
        );
    }

    /// Refuses tenant data in the namespace, kind or apiVersion of an `apply` manifest (parsed
    /// as the executor parses it, before substitution): the object would be written where, and
    /// as what, the tenant says. An unparseable `manifests` is the step's validation's error.
    fn manifest_targets(&mut self, manifests: &Value, here: &str) {
        use super::steering::{Choice, Steered};
        let Ok(objects) = pseudoflow_crd::steps::apply::manifest_objects(manifests) else {
            return;
        };
        for (i, obj) in objects.iter().enumerate() {
            for (field, choice) in [
                ("metadata.namespace", Choice::Namespace),
                ("kind", Choice::Kind),
                ("apiVersion", Choice::Kind),
            ] {
                let pointer = format!("/{}", field.replace('.', "/"));
                let Some(text) = obj.pointer(&pointer).and_then(Value::as_str) else {
                    continue;
                };
                let path = format!("{here}.manifests[{i}].{field}");
                let steered = Steered {
                    choice,
                    opt_in: None,
                };
                for seg in super::scan(text).unwrap_or_default() {
                    let super::Segment::Expr(e) = seg else {
                        continue;
                    };
                    let Ok(refs) = self.engine.check(&format!("${{{e}}}"), &path) else {
                        continue;
                    };
                    for r in refs {
                        if let Some(name) = self.tenant_data(&r.names) {
                            super::steering::check(
                                self.diags,
                                self.allowed,
                                &path,
                                steered,
                                &r.expr,
                                name,
                            );
                        }
                    }
                }
            }
        }
    }

    /// Checks one of a bound flow's status fields (rendered over the run's variables).
    fn status_field(&mut self, text: &str, path: &str) {
        let segments = match super::scan(text) {
            Ok(segs) => segs,
            Err(e) => return self.diags.error(path, e.to_string()),
        };
        for seg in segments {
            let super::Segment::Expr(expr) = seg else {
                continue;
            };
            match self.engine.check(&format!("${{{expr}}}"), path) {
                Err(e) => self.diags.error(
                    path,
                    format!("invalid expression ${{{expr}}}: {}", e.reason),
                ),
                Ok(refs) => {
                    for ExprRef { expr, plain, names } in refs {
                        self.unknown(path, &names, plain, &[], &expr);
                    }
                }
            }
        }
    }

    /// Warns when a step's output is spliced into a shell command without `| shq`: the output
    /// is data a command printed, and unquoted it is parsed as shell syntax.
    fn unquoted_output(&mut self, path: &str, expr: &str, names: &[String]) {
        if super::is_quoted(expr) {
            return;
        }
        let found = names.iter().find(|n| self.outputs.contains(*n));
        let Some(out) = found.or_else(|| self.tenant_data(names)) else {
            return;
        };
        let what = if self.bound.contains(&out.as_str()) {
            format!("the bound object's {out:?} (written by whoever may edit objects of the kind)")
        } else if self.tainted.contains(out) || !self.outputs.contains(out) {
            format!("{out:?}, tenant data (it reads the bound object)")
        } else {
            format!("step output {out:?}")
        };
        self.diags.warning(
            path,
            format!(
                "${{{}}} splices {what} into a shell command unquoted; write \
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

/// Whether `path` is one of the step's `fields` (given by name, as the step type's hooks do).
fn has_field(fields: &[&str], path: &str) -> bool {
    fields
        .iter()
        .any(|f| path.strip_suffix(f).is_some_and(|rest| rest.ends_with('.')))
}

fn is_builtin(name: &str) -> bool {
    matches!(
        name,
        "json" | "range" | "dict" | "namespace" | "true" | "false" | "none" | "loop"
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{test_flow as flow, test_included, test_warnings as warnings};
    use crate::Compiled;

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
    fn a_bound_flow_knows_object_and_trigger_and_checks_its_status_fields() {
        let id = crate::FlowId {
            name: "db",
            namespace: Some("ops"),
        };
        let spec = |fields: serde_json::Value| {
            json!({"bind": {"apiVersion": "example.com/v1", "kind": "Database",
                    "status": {"fields": fields}},
                "steps": [{"type": "log", "message": "${object.spec.version} ${trigger.event}"}]})
        };
        assert!(crate::compile(&id, &spec(json!({"pod": "${object.metadata.name}-pod"}))).is_ok());
        let errors: Vec<String> =
            crate::compile(&id, &spec(json!({"pod": "${nope.x}", "bad": "${(}"})))
                .unwrap_err()
                .errors()
                .map(|d| format!("{}: {}", d.path, d.message))
                .collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.bind.status.fields.bad: invalid expression"),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with("spec.bind.status.fields.pod: nope.x uses unknown variable"),
            "{errors:?}"
        );
        // The object is written by whoever may edit objects of the kind: unquoted in a command,
        // a warning, as for a step's output.
        let shell = json!({"bind": {"apiVersion": "example.com/v1", "kind": "Database"},
            "steps": [{"type": "exec", "cmd": "createdb ${object.spec.name}"},
                      {"type": "exec", "cmd": "createdb ${ object.spec.name | shq }"}]});
        let w = warnings(&crate::compile(&id, &shell).unwrap());
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with(
                "spec.steps[0].cmd: ${object.spec.name} splices the bound object's \"object\""
            ),
            "{w:?}"
        );
        // Related references are expressions over the object, checked as the status fields are.
        let related = |name: &str| {
            json!({"bind": {"apiVersion": "example.com/v1", "kind": "SecSynch",
                    "related": [{"apiVersion": "v1", "kind": "Secret", "name": name}]},
                "steps": [{"type": "log", "message": "${trigger.changed}"}]})
        };
        assert!(crate::compile(&id, &related("${object.spec.secretName}")).is_ok());
        let errors: Vec<String> = crate::compile(&id, &related("${nope.x}"))
            .unwrap_err()
            .errors()
            .map(|d| format!("{}: {}", d.path, d.message))
            .collect();
        assert!(
            errors[0].starts_with("spec.bind.related[0].name: nope.x uses unknown variable"),
            "{errors:?}"
        );
        // Without bind, `object` is no variable.
        let plain = json!({"steps": [{"type": "log", "message": "${object.spec.version}"}]});
        assert!(crate::compile(&id, &plain).is_err());
    }

    fn bound(quoting: &str, steps: serde_json::Value) -> Result<Compiled, Vec<String>> {
        let id = crate::FlowId {
            name: "db",
            namespace: Some("ops"),
        };
        let spec = json!({"bind": {"apiVersion": "example.com/v1", "kind": "Database"},
            "shellQuoting": quoting, "steps": steps});
        crate::compile(&id, &spec).map_err(|d| {
            d.errors()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect()
        })
    }

    #[test]
    fn a_loop_item_over_object_data_is_tenant_data_in_commands() {
        let steps = json!([
            {"type": "loop", "forEach": "${object.spec.users}", "steps": [
                {"type": "exec", "cmd": "echo hi ${item}"},
                {"type": "exec", "cmd": "echo hi ${item | raw}"}]},
            {"type": "loop", "forEach": "${['a']}", "steps": [
                {"type": "exec", "cmd": "echo hi ${item | raw}"}]},
        ]);
        // Written for v1alpha1 (raw): the unquoted item is warned about, as object data is.
        let w = warnings(&bound("raw", steps.clone()).unwrap());
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("spec.steps[0].steps[0].cmd: ${item} splices \"item\", tenant data"),
            "{w:?}"
        );
        // Quoted: only the explicit opt-out on tenant data warns; a loop over the author's
        // own list does not.
        let w = warnings(&bound("quoted", steps).unwrap());
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("spec.steps[0].steps[1].cmd: ${item | raw} opts out of quoting for \"item\", tenant data"),
            "{w:?}"
        );
    }

    #[test]
    fn an_output_of_a_step_that_read_object_data_is_tenant_data() {
        let w = warnings(
            &bound(
                "quoted",
                json!([
                    {"type": "template", "output": "cmdline", "template": "createdb {{ object.spec.name }}"},
                    {"type": "exec", "cmd": "${cmdline | raw}"},
                    {"type": "exec", "cmd": "hostname", "var": "h"},
                    {"type": "exec", "cmd": "${h | raw}"},
                ]),
            )
            .unwrap(),
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("spec.steps[1].cmd: ${cmdline | raw} opts out"),
            "{w:?}"
        );
    }

    #[test]
    fn pod_settings_from_object_data_are_refused_unless_allowed_by_name() {
        let steps = json!([
            {"type": "exec", "cmd": "true", "image": "${object.spec.toolImage}"},
            {"type": "exec", "cmd": "true", "namespace": "${object.spec.ns}"},
            {"type": "exec", "cmd": "true", "namespace": "${object.metadata.namespace}"},
            {"type": "execNode", "cmd": "true", "nodeSelector": "kubernetes.io/hostname=${object.spec.node}"},
        ]);
        let errors = bound("quoted", steps.clone()).unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].starts_with(
                "spec.steps[0].image: ${object.spec.toolImage} sets image from \"object\""
            ),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with("spec.steps[1].namespace: "),
            "{errors:?}"
        );
        assert!(
            errors[2].starts_with("spec.steps[3].nodeSelector: "),
            "{errors:?}"
        );
        assert!(
            errors[0].contains("spec.allowObjectData: [image]"),
            "{errors:?}"
        );
        let id = crate::FlowId {
            name: "db",
            namespace: Some("ops"),
        };
        let allowed = json!({"bind": {"apiVersion": "example.com/v1", "kind": "Database"},
            "allowObjectData": ["image", "namespace", "nodeSelector"], "steps": steps});
        assert!(crate::compile(&id, &allowed).is_ok());
    }

    /// docs/decisions.md, "An image in an `apply` manifest is the flow author's business": a
    /// bound flow may take a manifest's image from object data (the seed's MySQL operator does)
    /// with neither a refusal nor a warning, in a manifest given as an object or as text, while
    /// the same value as the step's own pod image is refused.
    #[test]
    fn an_image_in_an_apply_manifest_may_come_from_object_data() {
        let manifest = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "${object.metadata.name}"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "db", "image": "${object.spec.image}"}]}}}});
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - {name: c, image: \"${object.spec.image}\"}\n";
        for manifests in [manifest, json!(text)] {
            let c = bound("quoted", json!([{"type": "apply", "manifests": manifests}]))
                .unwrap_or_else(|e| panic!("{manifests}: {e:?}"));
            assert_eq!(warnings(&c), Vec::<String>::new(), "{manifests}");
        }
        let errors = bound(
            "quoted",
            json!([{"type": "exec", "cmd": "true", "image": "${object.spec.image}"}]),
        )
        .unwrap_err();
        assert!(errors[0].starts_with("spec.steps[0].image: "), "{errors:?}");
    }

    #[test]
    fn included_steps_are_traced_with_the_flow() {
        let id = crate::FlowId {
            name: "db",
            namespace: Some("ops"),
        };
        let spec = json!({"bind": {"apiVersion": "example.com/v1", "kind": "Database"},
            "steps": [
                {"type": "template", "output": "img", "template": "{{ object.spec.img }}"},
                {"type": "include", "source": {"configMapRef": {"name": "c", "key": "k"}}}]});
        // Included steps may name the flow's variables only plainly (`${img}`).
        let (include, found) = test_included(
            &id,
            &spec,
            json!([{"type": "exec", "cmd": "echo ${img}"},
                    {"type": "exec", "cmd": "true", "image": "${img}"}]),
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with(&format!(
                "Warning {include}[0].cmd: ${{img}} splices \"img\", tenant data"
            )),
            "{found:?}"
        );
        assert!(
            found[1].starts_with(&format!(
                "Error {include}[1].image: ${{img}} sets image from \"img\""
            )),
            "{found:?}"
        );
    }
}
