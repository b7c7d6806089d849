//! The depth check that runs before anything else reads a flow: every later pass (the schema
//! walk, serde, the compiler) recurses once per level, so a value or a chain of steps nested
//! thousands deep would overflow the stack. This walk is iterative (an explicit stack), refuses
//! values nested more than [`MAX_VALUE_DEPTH`] below their step and steps nested more than
//! [`MAX_STEP_DEPTH`], and names the path of the first value past the limit.
//!
//! The CRD cannot bound this: nested steps, `forEach`, `manifests` and conditions are
//! `x-kubernetes-preserve-unknown-fields` (a structural schema cannot recurse, and one typed copy
//! of the step schema per level would grow the CRD exponentially), and CEL has no recursion to
//! measure the depth of a free-form value. So the compiler is where depth is bounded.

use serde_json::Value;

use crate::diagnostics::Diagnostics;
use crate::limits::{MAX_DEPTH_REPORTS, MAX_STEP_DEPTH, MAX_VALUE_DEPTH};
use crate::step_schema::nested_fields;
use crate::text::join;

/// One segment of a path, linked to its parent in the walk's arena.
struct Crumb<'a> {
    parent: Option<usize>,
    seg: DepthSeg<'a>,
}

enum DepthSeg<'a> {
    Root(&'a str),
    Key(&'a str),
    Index(usize),
}

/// What a value is in the flow's structure, which decides how its children are counted.
#[derive(Clone, Copy)]
enum Role {
    /// `spec` itself: `steps` and `onDelete` hold top-level steps.
    Spec,
    /// A step (`steps` = its nesting level): its nested step fields hold steps one level down.
    Step { steps: usize },
    /// A list of steps inside a step at level `steps`.
    StepList { steps: usize },
    /// `parallel.steps`: a list of step lists.
    Branches { steps: usize },
    /// Any other value, `depth` levels below its step (or below `spec`).
    Plain { depth: usize },
}

struct Visit<'a> {
    value: &'a Value,
    crumb: usize,
    role: Role,
}

/// Checks the depth of a raw `spec` rooted at `root`; false (with diagnostics) when too deep.
pub fn check_depth(spec: &Value, root: &str, diags: &mut Diagnostics) -> bool {
    let mut crumbs = vec![Crumb {
        parent: None,
        seg: DepthSeg::Root(root),
    }];
    let mut stack = vec![Visit {
        value: spec,
        crumb: 0,
        role: Role::Spec,
    }];
    let mut reports = 0;
    while let Some(Visit { value, crumb, role }) = stack.pop() {
        let problem = match role {
            Role::Step { steps } if steps > MAX_STEP_DEPTH => {
                Some(format!("steps nested deeper than {MAX_STEP_DEPTH} levels"))
            }
            Role::Plain { depth } if depth > MAX_VALUE_DEPTH => {
                Some(format!("nested deeper than {MAX_VALUE_DEPTH} levels"))
            }
            _ => None,
        };
        if let Some(message) = problem {
            diags.error(render(&crumbs, crumb), message);
            reports += 1;
            if reports == MAX_DEPTH_REPORTS {
                break;
            }
            continue;
        }
        let first_child = stack.len();
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    crumbs.push(Crumb {
                        parent: Some(crumb),
                        seg: DepthSeg::Index(i),
                    });
                    let role = item_role(role, item);
                    stack.push(Visit {
                        value: item,
                        crumb: crumbs.len() - 1,
                        role,
                    });
                }
            }
            Value::Object(fields) => {
                let nested = match role {
                    Role::Step { .. } => value
                        .get("type")
                        .and_then(Value::as_str)
                        .map(nested_fields)
                        .unwrap_or_default(),
                    _ => Vec::new(),
                };
                for (key, v) in fields {
                    crumbs.push(Crumb {
                        parent: Some(crumb),
                        seg: DepthSeg::Key(key),
                    });
                    let kind = nested.iter().find(|(f, _)| f == key).map(|(_, k)| *k);
                    let role = field_role(role, key, kind, v);
                    stack.push(Visit {
                        value: v,
                        crumb: crumbs.len() - 1,
                        role,
                    });
                }
            }
            _ => {}
        }
        // Visit children in document order, so the first report is the first deep value.
        stack[first_child..].reverse();
    }
    reports == 0
}

/// The role of an item of a list whose own role is `list`.
fn item_role(list: Role, item: &Value) -> Role {
    match list {
        Role::StepList { steps } => Role::Step { steps: steps + 1 },
        Role::Branches { steps } if item.is_array() => Role::StepList { steps },
        Role::Branches { .. } => Role::Plain { depth: 2 },
        Role::Plain { depth } => Role::Plain { depth: depth + 1 },
        // A step or spec that is a list is no step; count its items as its fields.
        Role::Spec | Role::Step { .. } => Role::Plain { depth: 1 },
    }
}

/// The role of field `key` of an object whose own role is `parent`; `nested` is the kind of
/// step list the field holds for the step's type (`list` or `branches`), if any.
fn field_role(parent: Role, key: &str, nested: Option<&str>, v: &Value) -> Role {
    match parent {
        Role::Spec if matches!(key, "steps" | "onDelete") && v.is_array() => {
            Role::StepList { steps: 0 }
        }
        Role::Step { steps } if v.is_array() => match nested {
            Some("branches") => Role::Branches { steps },
            Some(_) => Role::StepList { steps },
            None => Role::Plain { depth: 1 },
        },
        Role::Plain { depth } => Role::Plain { depth: depth + 1 },
        _ => Role::Plain { depth: 1 },
    }
}

fn render(crumbs: &[Crumb], mut at: usize) -> String {
    let mut segs = Vec::new();
    loop {
        segs.push(&crumbs[at].seg);
        match crumbs[at].parent {
            Some(p) => at = p,
            None => break,
        }
    }
    let mut out = String::new();
    for seg in segs.into_iter().rev() {
        match seg {
            DepthSeg::Root(r) => out.push_str(r),
            DepthSeg::Key(k) => out = join(&out, k),
            DepthSeg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(spec: Value) -> Vec<String> {
        let mut d = Diagnostics::default();
        check_depth(&spec, "spec", &mut d);
        d.0.iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    }

    #[test]
    fn a_step_field_is_level_one_and_the_limit_is_inclusive() {
        // manifests (1) → 31 more objects (32): allowed; one more (33): refused.
        let at = |levels: usize| (0..levels).fold(json!(1), |v, _| json!({ "k": v }));
        let step = |m| json!({"steps": [{"type": "apply", "manifests": m}]});
        assert!(check(step(at(31))).is_empty());
        assert_eq!(
            check(step(at(32))),
            vec![format!(
                "spec.steps[0].manifests{}: nested deeper than 32 levels",
                ".k".repeat(32)
            )]
        );
    }

    #[test]
    fn values_count_again_from_each_nested_step() {
        let deep = (0..31).fold(json!(1), |v, _| json!({ "k": v }));
        let mut step = json!({"type": "apply", "manifests": deep});
        for _ in 0..10 {
            step = json!({"type": "retry", "attempts": 1, "steps": [step]});
        }
        assert!(check(json!({"steps": [step], "onDelete": [{"type": "log"}]})).is_empty());
    }

    #[test]
    fn a_field_that_holds_steps_in_one_type_is_a_plain_value_in_another() {
        // `then` is no step list of `log`: its items are values, not steps.
        let deep = (0..32).fold(json!(1), |v, _| json!([v]));
        let d = check(json!({"steps": [{"type": "log", "then": deep}]}));
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].starts_with("spec.steps[0].then[0]"), "{d:?}");
    }

    #[test]
    fn reports_stop_after_ten() {
        let deep = (0..40).fold(json!(1), |v, _| json!([v]));
        let steps: Vec<Value> = (0..50)
            .map(|_| json!({"type": "apply", "manifests": deep.clone()}))
            .collect();
        let d = check(json!({ "steps": steps }));
        assert_eq!(d.len(), MAX_DEPTH_REPORTS);
        assert!(d[0].starts_with("spec.steps[0].manifests"), "{d:?}");
    }

    #[test]
    fn a_deep_branch_that_is_no_list_is_counted_as_a_value() {
        let deep = (0..40).fold(json!(1), |v, _| json!({ "k": v }));
        let d = check(json!({"steps": [{"type": "parallel", "steps": [deep]}]}));
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].starts_with("spec.steps[0].steps[0].k"), "{d:?}");
    }
}
