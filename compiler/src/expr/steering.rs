//! Where a step acts, and whether tenant data may choose it: the namespace or kind of an object
//! a step reads or writes, a node file's path, and the lines a node file gets. Tenant data
//! (`${object...}` of a bound flow and what is derived from it, [`super::taint`]) in one of
//! these is refused naming its path, unless the step is one whose effect stays within the
//! flow's own objects and the flow opts in (`spec.allowObjectData`), which is then a warning
//! (docs/decisions.md#tenant-data-never-chooses-where-a-step-acts).

use pseudoflow_crd::quoting::ObjectDataField;
use pseudoflow_crd::{Diagnostics, StepKind};

/// What a field chooses when tenant data fills it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Choice {
    /// The namespace of an object the step reads or writes.
    Namespace,
    /// The kind (or apiVersion) of an object the step reads or writes.
    Kind,
    /// Which file on a node the step writes or removes (as root).
    NodePath,
    /// Lines of a node file: a tenant's line break adds one.
    NodeLines,
    /// The node a step cordons, drains or uncordons (as a node selector picks nodes).
    Node,
}

/// A field that chooses where its step acts, and the `spec.allowObjectData` value that may let
/// tenant data fill it (none where the step could then act on what this flow did not make).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Steered {
    pub choice: Choice,
    pub opt_in: Option<ObjectDataField>,
}

const fn refused(choice: Choice) -> Option<Steered> {
    Some(Steered {
        choice,
        opt_in: None,
    })
}

/// What the field at `relative` (its path under its step: `.target.namespace`, `.to[0].namespace`)
/// chooses in a step of `kind`. Fields of `apply` manifests are found by the caller, which
/// parses them ([`pseudoflow_crd::steps::apply::manifest_objects`]).
pub(super) fn steered(kind: &StepKind, relative: &str) -> Option<Steered> {
    let field = normalise(relative);
    let object_ref = |prefix: &str| match field.strip_prefix(prefix) {
        Some("namespace") => refused(Choice::Namespace),
        Some("kind" | "apiVersion") => refused(Choice::Kind),
        _ => None,
    };
    match kind {
        StepKind::Delete(p) => match field.as_str() {
            // Contained: it deletes only an object carrying this flow's copied-by mark.
            "target.namespace" if p.only_copies => Some(Steered {
                choice: Choice::Namespace,
                opt_in: Some(ObjectDataField::TargetNamespace),
            }),
            _ => object_ref("target."),
        },
        StepKind::SetLabel(_) | StepKind::RemoveLabel(_) | StepKind::PatchLabel(_) => {
            object_ref("target.")
        }
        StepKind::WaitFor(_) => object_ref("resource."),
        StepKind::If(_) | StepKind::When(_) => object_ref("condition.resource."),
        StepKind::Copy(_) => match field.as_str() {
            // Contained: a copy never overwrites an object without this flow's mark.
            "to[].namespace" => Some(Steered {
                choice: Choice::Namespace,
                opt_in: Some(ObjectDataField::TargetNamespace),
            }),
            "from.namespace" => refused(Choice::Namespace),
            _ => None,
        },
        StepKind::ConfigFile(_) | StepKind::PatchFile(_) | StepKind::DeleteFile(_)
            if field == "path" =>
        {
            refused(Choice::NodePath)
        }
        StepKind::ConfigFile(_) if field == "content" => Some(Steered {
            choice: Choice::NodeLines,
            opt_in: Some(ObjectDataField::NodeFileLines),
        }),
        StepKind::PatchFile(_) if field == "replace" => Some(Steered {
            choice: Choice::NodeLines,
            opt_in: Some(ObjectDataField::NodeFileLines),
        }),
        StepKind::Cordon(_) | StepKind::Drain(_) | StepKind::Uncordon(_) if field == "node" => {
            Some(Steered {
                choice: Choice::Node,
                opt_in: Some(ObjectDataField::NodeSelector),
            })
        }
        _ => None,
    }
}

/// `.to[3].namespace` → `to[].namespace`.
fn normalise(relative: &str) -> String {
    let mut out = String::with_capacity(relative.len());
    let mut in_index = false;
    for c in relative.trim_start_matches('.').chars() {
        match c {
            '[' => {
                in_index = true;
                out.push(c);
            }
            ']' => {
                in_index = false;
                out.push(c);
            }
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

/// Where tenant data (`tenant`, the variable read) in expression `expr` at `path` is fine as it
/// is: the object's own namespace (set by the API server: a tenant names only a namespace they
/// may already create objects in) and a value that stays on one line, or anything spelled so.
fn exempt(choice: Choice, expr: &str) -> bool {
    let expr = expr.trim();
    match choice {
        Choice::Namespace => expr == "object.metadata.namespace",
        Choice::Kind | Choice::NodePath | Choice::Node => false,
        Choice::NodeLines => {
            matches!(expr, "object.metadata.namespace" | "object.metadata.name")
                || super::is_oneline(expr)
        }
    }
}

/// What a tenant would choose, said in an error or a warning.
fn chooses(choice: Choice) -> &'static str {
    match choice {
        Choice::Namespace => "the namespace of an object the step acts on",
        Choice::Kind => "the kind of an object the step acts on",
        Choice::NodePath => "a node file's path",
        Choice::NodeLines => "lines of a node file",
        Choice::Node => "the node the step changes",
    }
}

const TENANT: &str =
    "tenant data (from the bound object, written by whoever may edit objects of the kind)";

/// Refuses tenant data `tenant` in a field that chooses where its step acts, naming `path`, or
/// warns when the flow allowed it where the step contains it (`allowed`).
pub(super) fn check(
    diags: &mut Diagnostics,
    allowed: &[ObjectDataField],
    path: &str,
    steered: Steered,
    expr: &str,
    tenant: &str,
) {
    if exempt(steered.choice, expr) {
        return;
    }
    let e = expr.trim();
    match steered.opt_in {
        Some(opt) if allowed.contains(&opt) => diags.warning(path, allowed_warning(opt, e, tenant)),
        Some(opt) => diags.error(path, refusal(steered.choice, Some(opt), e, tenant)),
        None => diags.error(path, refusal(steered.choice, None, e, tenant)),
    }
}

fn refusal(choice: Choice, opt_in: Option<ObjectDataField>, e: &str, tenant: &str) -> String {
    let what = chooses(choice);
    let fix = match (choice, opt_in) {
        (Choice::NodeLines, Some(opt)) => format!(
            "a line break in it adds a line of theirs; write ${{ {e} | oneline }} (a value \
             with a line break then fails the step), or allow it with \
             spec.allowObjectData: [{}]",
            opt.field()
        ),
        (Choice::Node, Some(opt)) => format!(
            "they would choose which node is cordoned or drained; write `${{node}}` in a \
             loopNodes with a fixed selector, or allow it with spec.allowObjectData: [{}]",
            opt.field()
        ),
        (_, Some(opt)) => format!(
            "they would choose where the flow's ServiceAccount writes; write a fixed \
             namespace or ${{object.metadata.namespace}}, or allow it with \
             spec.allowObjectData: [{}] (this step touches only copies this flow made)",
            opt.field()
        ),
        (Choice::NodePath, None) => "they would choose which file is written as root on \
             the node (the object's name too: `passwd` is a name); write a fixed path (no \
             opt-in)"
            .to_string(),
        (Choice::Namespace, None) => "they would choose where the flow's ServiceAccount \
             reads or writes; write a fixed namespace or ${object.metadata.namespace} (no \
             opt-in: this step would act on objects this flow did not make)"
            .to_string(),
        (_, None) => "they would choose what the flow's ServiceAccount reads or writes; \
             write a fixed kind (no opt-in: this step would act on objects this flow did \
             not make)"
            .to_string(),
    };
    format!("${{{e}}} sets {what} from {tenant:?}, {TENANT}: {fix}")
}

fn allowed_warning(opt: ObjectDataField, e: &str, tenant: &str) -> String {
    let lets = match opt {
        ObjectDataField::NodeFileLines => {
            "a line break in it lets them add lines to the file, written as root"
        }
        ObjectDataField::NodeSelector => {
            "they choose which node is cordoned, drained or uncordoned, among those the flow's \
             ServiceAccount may patch"
        }
        _ => {
            "they choose the namespaces (among those the flow's ServiceAccount may write) \
             where this flow's copies are made and deleted; an object the flow did not copy \
             is never overwritten nor deleted"
        }
    };
    format!(
        "${{{e}}} takes {} from {tenant:?}, {TENANT}, as spec.allowObjectData: [{}] \
         allows: {lets}",
        match opt {
            ObjectDataField::NodeFileLines => "lines of a node file",
            ObjectDataField::NodeSelector => "the node this step changes",
            _ => "the namespace this step writes to",
        },
        opt.field()
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::{test_included, test_warnings as warnings};
    use crate::Compiled;

    fn bound(extra: Value, steps: Value) -> Result<Compiled, Vec<String>> {
        let id = crate::FlowId {
            name: "sync",
            namespace: Some("ops"),
        };
        let mut spec = json!({"bind": {"apiVersion": "example.com/v1", "kind": "Sync"},
            "shellQuoting": "quoted", "steps": steps});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        crate::compile(&id, &spec).map_err(|d| {
            d.errors()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect()
        })
    }

    fn assert_paths(errors: &[String], paths: &[&str]) {
        assert_eq!(errors.len(), paths.len(), "{errors:#?}");
        for (e, p) in errors.iter().zip(paths) {
            assert!(e.starts_with(&format!("{p}: ")), "{p} in {errors:#?}");
        }
    }

    /// Issue #42 item 5: each of these compiled with neither an error nor a warning.
    #[test]
    fn a_namespace_or_kind_from_object_data_is_refused_naming_its_path() {
        let steps = json!([
            {"type": "delete", "target": {"kind": "Secret", "name": "s", "namespace": "${object.spec.ns}"}},
            {"type": "waitFor", "condition": "Exist", "resource": {"kind": "${object.spec.kind}", "name": "s"}},
            {"type": "setLabel", "labels": {"a": "b"}, "target": {"kind": "Secret", "name": "s", "namespace": "${object.spec.ns}"}},
            {"type": "copy", "from": {"kind": "Secret", "name": "s", "namespace": "${object.spec.from}"},
                "to": [{"namespace": "${object.metadata.namespace}", "name": "mine"}]},
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "ns-${object.spec.ns}"}}},
            {"type": "apply", "manifests": "apiVersion: v1\nkind: ${object.spec.kind}\nmetadata: {name: c}\n"},
            {"type": "if", "condition": {"resource": {"kind": "Secret", "name": "s", "namespace": "${object.spec.ns}"},
                "jsonPath": ".type", "op": "equals", "value": "x"}, "then": [{"type": "log", "message": "y"}]},
            {"type": "removeLabel", "keys": ["a"], "target": {"apiVersion": "${object.spec.group}/v1", "kind": "Secret", "name": "s"}},
            // The object's own name is no namespace: a tenant names an object `kube-system`.
            {"type": "exec", "cmd": "true", "namespace": "${object.metadata.name}"},
        ]);
        let errors = bound(json!({}), steps).unwrap_err();
        assert_paths(
            &errors,
            &[
                "spec.steps[0].target.namespace",
                "spec.steps[1].resource.kind",
                "spec.steps[2].target.namespace",
                "spec.steps[3].from.namespace",
                "spec.steps[4].manifests[0].metadata.namespace",
                "spec.steps[5].manifests[0].kind",
                "spec.steps[6].condition.resource.namespace",
                "spec.steps[7].target.apiVersion",
                "spec.steps[8].namespace",
            ],
        );
        assert!(
            errors[0].contains("${object.spec.ns} sets the namespace of an object the step acts on from \"object\""),
            "{errors:#?}"
        );
        assert!(errors[1].contains("sets the kind"), "{errors:#?}");
    }

    #[test]
    fn the_objects_own_namespace_and_a_flows_own_values_may_choose() {
        let steps = json!([
            {"type": "delete", "target": {"kind": "Secret", "name": "${object.metadata.name}", "namespace": "${object.metadata.namespace}"}},
            {"type": "waitFor", "condition": "Exist", "resource": {"kind": "${kind}", "name": "s", "namespace": "${ns}"}},
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "${object.spec.name}", "namespace": "${object.metadata.namespace}"},
                "data": {"namespace": "${object.spec.ns}", "kind": "${object.spec.kind}"}}},
            {"type": "configFile", "path": "/etc/app/${name}.conf", "content": "a=${name}\n",
                "nodeSelector": "role=db"},
        ]);
        let c = bound(
            json!({"vars": {"kind": "Secret", "ns": "ops", "name": "app"}}),
            steps,
        )
        .unwrap_or_else(|e| panic!("{e:#?}"));
        assert_eq!(warnings(&c), Vec::<String>::new());
    }

    #[test]
    fn a_node_file_path_from_object_data_is_refused_even_the_objects_name() {
        let steps = json!([
            {"type": "configFile", "path": "/etc/${object.metadata.name}", "content": "x\n", "nodeSelector": ""},
            {"type": "patchFile", "path": "${object.spec.file}", "pattern": "a", "replace": "b", "nodeSelector": ""},
            {"type": "loopNodes", "selector": "", "steps": [
                {"type": "deleteFile", "path": "/etc/app/${object.spec.file}"}]},
        ]);
        let errors = bound(json!({"allowObjectData": ["nodeSelector"]}), steps).unwrap_err();
        assert_paths(
            &errors,
            &[
                "spec.steps[0].path",
                "spec.steps[1].path",
                "spec.steps[2].steps[0].path",
            ],
        );
        assert!(
            errors[0].contains("sets a node file's path from \"object\""),
            "{errors:#?}"
        );
    }

    #[test]
    fn tenant_data_in_node_file_lines_must_be_one_line_or_allowed_with_a_warning() {
        let steps = json!([
            {"type": "configFile", "path": "/etc/app.conf", "content": "user=${object.spec.user}\n", "nodeSelector": ""},
            {"type": "patchFile", "path": "/etc/app.conf", "pattern": "^user=.*$", "replace": "user=${object.spec.user}", "nodeSelector": ""},
            {"type": "configFile", "path": "/etc/b.conf", "content": "user=${ object.spec.user | oneline }\n", "nodeSelector": ""},
        ]);
        let errors = bound(json!({}), steps.clone()).unwrap_err();
        assert_paths(&errors, &["spec.steps[0].content", "spec.steps[1].replace"]);
        assert!(
            errors[0].contains("${ object.spec.user | oneline }")
                && errors[0].contains("spec.allowObjectData: [nodeFileLines]"),
            "{errors:#?}"
        );
        let c = bound(json!({"allowObjectData": ["nodeFileLines"]}), steps).unwrap();
        let w = warnings(&c);
        assert_eq!(w.len(), 2, "{w:#?}");
        assert!(
            w[0].starts_with("spec.steps[0].content: ")
                && w[0].contains("allowObjectData: [nodeFileLines]")
                && w[0].contains("add lines"),
            "{w:#?}"
        );
    }

    /// Seed 002's shape: a copy into namespaces the object lists, and the deletion of those
    /// copies, are the only steps that may be opted in (each touches only what this flow made).
    #[test]
    fn copies_and_their_deletion_may_take_a_namespace_from_object_data_when_allowed_with_a_warning()
    {
        let steps = json!([
            {"type": "loop", "forEach": "${object.spec.namespaces}", "steps": [
                {"type": "copy", "from": {"kind": "Secret", "name": "s"}, "to": [{"namespace": "${item}"}]},
                {"type": "delete", "onlyCopies": true, "target": {"kind": "Secret", "name": "s", "namespace": "${item}"}}]},
        ]);
        let errors = bound(json!({}), steps.clone()).unwrap_err();
        assert_paths(
            &errors,
            &[
                "spec.steps[0].steps[0].to[0].namespace",
                "spec.steps[0].steps[1].target.namespace",
            ],
        );
        assert!(
            errors[0].contains("spec.allowObjectData: [targetNamespace]"),
            "{errors:#?}"
        );
        let c = bound(json!({"allowObjectData": ["targetNamespace"]}), steps).unwrap();
        let w = warnings(&c);
        assert_eq!(w.len(), 2, "{w:#?}");
        assert!(
            w[0].starts_with("spec.steps[0].steps[0].to[0].namespace: ")
                && w[0].contains("allowObjectData: [targetNamespace]"),
            "{w:#?}"
        );
        // The opt-in opens nothing else: a plain delete, a copy's source, a label.
        let others = json!([
            {"type": "delete", "target": {"kind": "Secret", "name": "s", "namespace": "${object.spec.ns}"}},
            {"type": "copy", "from": {"kind": "Secret", "name": "s", "namespace": "${object.spec.ns}"}, "to": [{"namespace": "ops"}]},
            {"type": "setLabel", "labels": {"a": "b"}, "target": {"kind": "Secret", "name": "s", "namespace": "${object.spec.ns}"}},
            {"type": "delete", "onlyCopies": true, "target": {"kind": "${object.spec.kind}", "name": "s", "namespace": "ops"}},
        ]);
        let errors = bound(json!({"allowObjectData": ["targetNamespace"]}), others).unwrap_err();
        assert_paths(
            &errors,
            &[
                "spec.steps[0].target.namespace",
                "spec.steps[1].from.namespace",
                "spec.steps[2].target.namespace",
                "spec.steps[3].target.kind",
            ],
        );
        assert!(errors[0].contains("no opt-in"), "{errors:#?}");
    }

    #[test]
    fn an_output_derived_from_object_data_steers_nothing_either() {
        let steps = json!([
            {"type": "template", "output": "ns", "template": "{{ object.spec.ns }}"},
            {"type": "waitFor", "condition": "Exist", "resource": {"kind": "Secret", "name": "s", "namespace": "${ns}"}},
        ]);
        let errors = bound(json!({}), steps).unwrap_err();
        assert_paths(&errors, &["spec.steps[1].resource.namespace"]);
    }

    /// Steps an include fetched are checked with the flow, as its own are.
    #[test]
    fn an_included_step_taking_a_namespace_from_object_data_is_refused() {
        let id = crate::FlowId {
            name: "sync",
            namespace: Some("ops"),
        };
        let spec = json!({"bind": {"apiVersion": "example.com/v1", "kind": "Sync"},
            "steps": [
                {"type": "template", "output": "ns", "template": "{{ object.spec.ns }}"},
                {"type": "include", "source": {"configMapRef": {"name": "c", "key": "k"}}}]});
        let (include, found) = test_included(
            &id,
            &spec,
            json!([{"type": "delete", "target": {"kind": "Secret", "name": "s", "namespace": "${ns}"}}]),
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with(&format!(
                "Error {include}[0].target.namespace: ${{ns}} sets the namespace"
            )),
            "{found:?}"
        );
    }

    /// The node a step cordons, drains or uncordons is where it acts, as a node selector is:
    /// refused unless `allowObjectData: [nodeSelector]`, then warned.
    #[test]
    fn a_node_to_cordon_or_drain_from_object_data_is_refused_unless_nodes_are_allowed() {
        let steps = json!([
            {"type": "cordon", "node": "${object.spec.node}"},
            {"type": "drain", "node": "${object.spec.node}"},
            {"type": "uncordon", "node": "${object.spec.node}"},
        ]);
        let errors = bound(json!({}), steps.clone()).unwrap_err();
        assert_paths(
            &errors,
            &[
                "spec.steps[0].node",
                "spec.steps[1].node",
                "spec.steps[2].node",
            ],
        );
        assert!(
            errors[0].contains("sets the node the step changes from \"object\"")
                && errors[0].contains("spec.allowObjectData: [nodeSelector]"),
            "{errors:#?}"
        );
        let c = bound(json!({"allowObjectData": ["nodeSelector"]}), steps).unwrap();
        let w = warnings(&c);
        assert_eq!(w.len(), 3, "{w:#?}");
        assert!(w[0].starts_with("spec.steps[0].node: "), "{w:#?}");
    }
}
