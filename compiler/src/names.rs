//! Deterministic, valid Kubernetes names for everything a run creates. Determinism is what
//! makes launching idempotent: a restarted controller computes the same Job name and finds the
//! Job it already created instead of creating a second one.

/// 64-bit FNV-1a over the parts (with separators): stable across builds and platforms, which
/// `std`'s hasher is not. Used for uniqueness, not security.
pub fn stable_hash(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

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

/// Hex SHA-256 over the parts, each followed by a 0xff separator (no part boundary can be
/// shifted to give the same bytes: 0xff never occurs in UTF-8).
pub fn sha256_hex(parts: &[&str]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        ctx.update(part.as_bytes());
        ctx.update(&[0xff]);
    }
    hex(ctx.finish().as_ref())
}

/// Hex SHA-256 of `bytes` as they are: the digest of an executor's input document that its Job
/// carries, so the executor can refuse an input that is not the one its Job was made for.
pub fn content_digest(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lowercases and replaces anything outside `[a-z0-9-]` so the text can be part of a name.
pub fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').to_string()
}

/// `<readable part>-<hash>`, at most `max` characters, starting and ending alphanumeric.
pub fn bounded_name(readable: &str, hash: u64, max: usize) -> String {
    let suffix = format!("{:010x}", hash & 0xff_ffff_ffff);
    let room = max.saturating_sub(suffix.len() + 1);
    let mut base: String = sanitize(readable).chars().take(room).collect();
    base = base.trim_end_matches('-').to_string();
    if base.is_empty() {
        format!("pf-{suffix}")
    } else {
        format!("{base}-{suffix}")
    }
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

/// A label value (≤ 63, alphanumeric ends) that still reads like the original.
pub fn label_value(s: &str) -> String {
    let ok = s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && s.chars().last().is_none_or(|c| c.is_ascii_alphanumeric());
    if ok {
        s.to_string()
    } else {
        bounded_name(s, stable_hash(&[s]), 63)
    }
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
    fn label_values_are_kept_when_valid_and_bounded_otherwise() {
        assert_eq!(label_value("s3-then0"), "s3-then0");
        let long = "x".repeat(80);
        assert!(label_value(&long).len() <= 63);
        assert_ne!(label_value("a/b"), "a/b");
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

    #[test]
    fn content_digests_are_sha256() {
        assert_eq!(
            content_digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
