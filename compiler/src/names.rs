//! Deterministic, valid Kubernetes names for everything a run creates. Determinism is what
//! makes launching idempotent: a restarted controller computes the same Job name and finds the
//! Job it already created instead of creating a second one. The helpers the executor shares
//! (label values, digests) live in [`pseudoflow_crd::protocol::names`] and are re-exported here.

pub use pseudoflow_crd::protocol::names::{
    bounded_name, content_digest, label_value, sanitize, sha256_hex, stable_hash,
};

/// Id of a run, from what started it: the flow object (its uid: a flow deleted and created
/// again under the same name is a new object, whose runs must never take the old one's Jobs,
/// still waiting for garbage collection, for their own), the spec generation and the run
/// annotation's value. 128 bits of SHA-256: whoever may set the run annotation cannot search for
/// a value whose id (and so whose Job names and labels) equals another run's.
pub fn run_id(flow_uid: &str, generation: i64, trigger: Option<&str>) -> String {
    let g = generation.to_string();
    let digest = sha256_hex(&[flow_uid, &g, trigger.unwrap_or("")]);
    format!("r{}", &digest[..32])
}

/// Name of the Job (and its input ConfigMap) for one attempt of one node instance: ≤ 63
/// characters, because the Job controller copies it into a label value.
pub fn job_name(
    flow: &str,
    run_id: &str,
    node_id: &str,
    instance: &[String],
    attempt: u32,
) -> String {
    let inst = instance.join("/");
    let a = attempt.to_string();
    let hash = stable_hash(&[flow, run_id, node_id, &inst, &a]);
    bounded_name(&format!("{flow}-{node_id}"), hash, 63)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_are_deterministic_and_distinct() {
        let a = job_name("flow", "r1", "s3-s0", &["worker-0".into()], 1);
        assert_eq!(a, job_name("flow", "r1", "s3-s0", &["worker-0".into()], 1));
        assert_ne!(a, job_name("flow", "r1", "s3-s0", &["worker-1".into()], 1));
        assert_ne!(a, job_name("flow", "r1", "s3-s0", &["worker-0".into()], 2));
        assert_ne!(a, job_name("flow", "r2", "s3-s0", &["worker-0".into()], 1));
        assert!(a.starts_with("flow-s3-s0-"));
    }

    #[test]
    fn long_inputs_still_give_valid_names() {
        let flow = "a-very-long-flow-name-that-goes-on-and-on-and-on-beyond-sixty-three-chars";
        let n = job_name(flow, "r1", "s10-then-s2-b1-s0", &[], 1);
        assert!(n.len() <= 63, "{n}");
        assert!(n
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        assert!(n.chars().next().unwrap().is_ascii_alphanumeric());
        assert!(n.chars().last().unwrap().is_ascii_alphanumeric());
    }

    #[test]
    fn run_ids_depend_on_flow_object_generation_and_trigger() {
        assert_eq!(run_id("u1", 1, None), run_id("u1", 1, None));
        assert_ne!(run_id("u1", 1, None), run_id("u2", 1, None));
        assert_ne!(run_id("u1", 1, None), run_id("u1", 2, None));
        assert_ne!(run_id("u1", 1, None), run_id("u1", 1, Some("again")));
    }

    #[test]
    fn run_ids_carry_128_bits_and_fit_a_label_value() {
        let id = run_id("u1", 1, Some("again"));
        assert_eq!(id.len(), 33, "{id}");
        assert!(id[1..].chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        // Shifting text between the parts gives another id.
        assert_ne!(run_id("u1", 12, None), run_id("u11", 2, None));
    }
}
