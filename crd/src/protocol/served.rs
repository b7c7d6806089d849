//! The key of a bound flow's served mark (`bind.record: Object`): the annotation the controller
//! writes on each object it served (`controller/src/bind/served.rs`) and `kubectl pf get` reads
//! to tell a served object from a pending one. Defined once, here, so they cannot drift.

use super::names::{bounded_name, stable_hash};

/// Prefix of every served mark (left out of `${object}`, as the child marks are).
pub const SERVED_PREFIX: &str = "served.ops.example.com/";

/// The annotation bound flow `flow` (in `ns`) marks its objects with: one per flow, so two
/// flows bound to one kind keep their marks apart.
pub fn mark_key(ns: &str, flow: &str) -> String {
    let name = bounded_name(&format!("flow-{flow}"), stable_hash(&[ns, flow]), 63);
    format!("{SERVED_PREFIX}{name}")
}

/// The annotation bound flow `flow` (in `ns`) keeps an object's run progress in while a step
/// not safe to repeat is part of it (`controller/src/bind/in_object/progress/mod.rs`): under the
/// served prefix, so it is left out of `${object}` and of what counts as the object's change.
pub fn progress_key(ns: &str, flow: &str) -> String {
    let name = bounded_name(&format!("progress-{flow}"), stable_hash(&[ns, flow]), 63);
    format!("{SERVED_PREFIX}{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_a_valid_annotation_name_per_flow_and_namespace() {
        let long = "long-name".repeat(10);
        for (ns, flow) in [("ops", "gadgets"), ("a", long.as_str())] {
            let key = mark_key(ns, flow);
            let name = key.strip_prefix(SERVED_PREFIX).expect("prefixed");
            assert!(!name.is_empty() && name.len() <= 63, "{key}");
        }
        assert_ne!(mark_key("ops", "gadgets"), mark_key("other", "gadgets"));
        assert_eq!(mark_key("ops", "gadgets"), mark_key("ops", "gadgets"));
        let progress = progress_key("ops", "gadgets");
        assert!(progress.starts_with(SERVED_PREFIX) && progress != mark_key("ops", "gadgets"));
        assert!(progress.len() - SERVED_PREFIX.len() <= 63);
    }
}
