//! Run-time YAML bodies (an `applyFile`/`deleteFile` artifact, included manifests): `${...}` is
//! substituted with the run's variables (the step's `bodyVars`, sent by the controller) inside
//! the *parsed* string values — never in the text, so a value holding `\n  kind: Secret` or
//! `---` stays one string and cannot add objects or fields. Same engine and rules as step
//! fields: single pass (an inserted value is never scanned again), `$${` for a literal `${`,
//! an unknown plain name left as is.

use pseudoflow_crd::protocol::BODY_VARS;
use pseudoflow_expr::{Engine, Scope};
use serde_json::Value;

use crate::error::StepError;

/// The variables a body may use, from the step's payload; none when the controller sent none.
pub fn vars(step: &Value) -> Scope {
    step.get(BODY_VARS)
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// Substitutes inside the body's objects. `origin` names the body in errors (`dns.yaml`);
/// `secret` hides the expression and the engine's reason, which could quote the Secret.
pub fn substitute(
    objects: Vec<Value>,
    vars: &Scope,
    origin: &str,
    secret: bool,
) -> Result<Vec<Value>, StepError> {
    let engine = Engine::new();
    objects
        .iter()
        .enumerate()
        .map(|(i, obj)| {
            let path = format!("{origin}[{i}]");
            refuse_tenant_targets(&engine, obj, &path, secret)?;
            engine
                .substitute(obj, vars, &path)
                .map(|(v, _warnings)| v)
                .map_err(|e| {
                    if secret {
                        StepError::failed(format!(
                            "{}: an expression could not be evaluated (not shown: the body is a Secret's)",
                            e.path
                        ))
                    } else {
                        StepError::failed(e.to_string())
                    }
                })
        })
        .collect()
}

/// The fields of a body's object that choose where it is written and as what.
const TARGET_FIELDS: [&str; 3] = ["metadata.namespace", "kind", "apiVersion"];

/// Refuses a body object whose namespace, kind or apiVersion reads the bound object or its
/// trigger (tenant data) straight, except the object's own namespace: the compiler refuses
/// these in a step's fields, but a body is read only at run time
/// (docs/decisions.md#tenant-data-never-chooses-where-a-step-acts). A variable the flow derived
/// from the object is not traced here.
fn refuse_tenant_targets(
    engine: &Engine,
    obj: &Value,
    path: &str,
    secret: bool,
) -> Result<(), StepError> {
    for field in TARGET_FIELDS {
        let pointer = format!("/{}", field.replace('.', "/"));
        let Some(text) = obj.pointer(&pointer).and_then(Value::as_str) else {
            continue;
        };
        let at = format!("{path}.{field}");
        // An expression that does not parse fails in the substitution that follows.
        for r in engine.check(text, &at).unwrap_or_default() {
            let tenant = r.names.iter().any(|n| n == "object" || n == "trigger");
            let own = field == "metadata.namespace" && r.expr.trim() == "object.metadata.namespace";
            if tenant && !own {
                let expr = if secret {
                    "an expression".to_string()
                } else {
                    format!("${{{}}}", r.expr.trim())
                };
                return Err(StepError::failed(format!(
                    "{at}: {expr} takes it from the bound object, tenant data: whoever may \
                     edit objects of the kind would choose where this body's object is written \
                     and as what; write a fixed value (or ${{object.metadata.namespace}})"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use pseudoflow_crd::steps::apply::manifest_objects;
    use serde_json::json;

    use super::*;

    fn body(text: &str) -> Vec<Value> {
        manifest_objects(&Value::String(text.into())).unwrap()
    }

    fn scope(pairs: &[(&str, Value)]) -> Scope {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn a_value_cannot_inject_yaml_structure_or_be_evaluated_again() {
        let objs = body(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-${ns}\ndata:\n  a: ${evil}\n  b: x ${nested} y\n",
        );
        let sc = scope(&[
            ("ns", json!("team")),
            ("evil", json!("v\n  kind: Secret\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: injected}")),
            ("nested", json!("${ns}")),
        ]);
        let out = substitute(objs, &sc, "cm.yaml", false).unwrap();
        assert_eq!(out.len(), 1, "no object added: {out:?}");
        assert_eq!(out[0]["kind"], "ConfigMap");
        assert_eq!(out[0]["metadata"]["name"], "cm-team");
        assert_eq!(
            out[0]["data"]["a"],
            json!(
                "v\n  kind: Secret\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: injected}"
            )
        );
        assert_eq!(
            out[0]["data"]["b"],
            json!("x ${ns} y"),
            "single pass: an inserted value is not scanned again"
        );
    }

    #[test]
    fn double_dollar_escapes_and_unknown_plain_names_stay() {
        let objs = body("kind: ConfigMap\ndata:\n  a: $${ns}\n  b: ${HOME}\n  c: ${ns}\n");
        let out = substitute(objs, &scope(&[("ns", json!("t"))]), "x.yaml", false).unwrap();
        assert_eq!(out[0]["data"]["a"], "${ns}");
        assert_eq!(out[0]["data"]["b"], "${HOME}");
        assert_eq!(out[0]["data"]["c"], "t");
    }

    #[test]
    fn a_failing_expression_names_the_body_and_a_secret_body_is_not_quoted() {
        let objs = body("kind: ConfigMap\ndata:\n  a: ${HOME:-x}\n");
        let err = substitute(objs.clone(), &Scope::new(), "x.yaml", false).unwrap_err();
        assert!(err.to_string().contains("x.yaml[0].data.a"), "{err}");
        assert!(err.to_string().contains("HOME:-x"), "{err}");
        let err = substitute(objs, &Scope::new(), "Secret s key k", true).unwrap_err();
        assert!(
            err.to_string().contains("Secret s key k[0].data.a"),
            "{err}"
        );
        assert!(!err.to_string().contains("HOME"), "{err}");
    }

    #[test]
    fn vars_come_from_the_payload() {
        let sc = vars(&json!({"type": "applyFile", "bodyVars": {"a": "1", "n": 2}}));
        assert_eq!(sc.get("n"), Some(&json!(2)));
        assert!(vars(&json!({"type": "applyFile"})).is_empty());
    }

    /// Issue #42 item 5, for what the compiler cannot see: an artifact's (or an included
    /// body's) namespace, kind or apiVersion read straight from the bound object is refused,
    /// naming the field; the object's own namespace and other fields stay allowed.
    #[test]
    fn a_body_never_takes_its_namespace_or_kind_from_the_bound_object() {
        let sc = scope(&[
            (
                "object",
                json!({"metadata": {"namespace": "team", "name": "w"}, "spec": {"ns": "kube-system", "kind": "Secret"}}),
            ),
            ("trigger", json!({"event": "create"})),
        ]);
        for (text, field) in [
            ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: ${object.spec.ns}\n", "metadata.namespace"),
            ("apiVersion: v1\nkind: ${object.spec.kind}\nmetadata:\n  name: c\n", "kind"),
            ("apiVersion: ${trigger.event}/v1\nkind: ConfigMap\nmetadata:\n  name: c\n", "apiVersion"),
        ] {
            let err = substitute(body(text), &sc, "app.yaml", false)
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("app.yaml[0].{field}")), "{err}");
            assert!(err.contains("tenant data"), "{err}");
        }
        let ok = body("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${object.spec.ns}\n  namespace: ${object.metadata.namespace}\ndata:\n  kind: ${object.spec.kind}\n");
        let out = substitute(ok, &sc, "app.yaml", false).unwrap();
        assert_eq!(out[0]["metadata"]["namespace"], "team");
        assert_eq!(out[0]["data"]["kind"], "Secret");
    }
}
