//! Deterministic names, label values and digests that both sides of the executor contract
//! compute: the controller labels and names what it creates with them, the executor labels its
//! result ConfigMap and checks its input's digest with the same functions, so the two agree
//! without the executor depending on the compiler.

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

/// The key a segment Job's journal is signed with: derived from the run's secret (kept in the
/// run-state Secret) and the Job's name, and handed to the executor in its input Secret. Only
/// who can read Secrets can sign a journal entry; who can only write ConfigMaps cannot.
pub fn journal_key(run_secret: &str, job_name: &str) -> String {
    sha256_hex(&["pseudoflow-journal", run_secret, job_name])
}

/// Hex HMAC-SHA256 of `message` under `key`.
pub fn mac_hex(key: &str, message: &[u8]) -> String {
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes());
    hex(ring::hmac::sign(&k, message).as_ref())
}

/// Whether `mac` (hex) is `message`'s HMAC-SHA256 under `key`, compared in constant time.
pub fn mac_ok(key: &str, message: &[u8], mac: &str) -> bool {
    let Some(tag) = unhex(mac) else {
        return false;
    };
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes());
    ring::hmac::verify(&k, message, &tag).is_ok()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
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

/// Hex characters of SHA-256 a [`resistant_name`] keeps: 128 bits, so finding two inputs with
/// the same name takes about 2^64 hashes (FNV-1a's 40 bits took seconds).
pub const RESISTANT_HASH_HEX: usize = 32;

/// `<readable part>-<128 bits of SHA-256 over parts>`, at most `max` characters: a name that
/// whoever picks the parts (a tenant naming an object) cannot make equal another's.
pub fn resistant_name(readable: &str, parts: &[&str], max: usize) -> String {
    let digest = sha256_hex(parts);
    let suffix = &digest[..RESISTANT_HASH_HEX];
    let room = max.saturating_sub(suffix.len() + 1);
    let base: String = sanitize(readable).chars().take(room).collect();
    let base = base.trim_end_matches('-');
    if base.is_empty() {
        format!("pf-{suffix}")
    } else {
        format!("{base}-{suffix}")
    }
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
    fn label_values_are_kept_when_valid_and_bounded_otherwise() {
        assert_eq!(label_value("s3-then0"), "s3-then0");
        let long = "x".repeat(80);
        assert!(label_value(&long).len() <= 63);
        assert_ne!(label_value("a/b"), "a/b");
    }

    #[test]
    fn resistant_names_are_bounded_and_keep_128_bits() {
        let n = resistant_name(&"x".repeat(100), &["a", "b"], 63);
        assert_eq!(n.len(), 63, "{n}");
        let suffix = n.rsplit('-').next().unwrap();
        assert_eq!(suffix.len() * 4, 128);
        assert_eq!(suffix, &sha256_hex(&["a", "b"])[..32]);
        assert!(resistant_name("--", &["a"], 63).starts_with("pf-"));
        assert_ne!(
            resistant_name("a", &["a", "b"], 63),
            resistant_name("a", &["ab", ""], 63)
        );
    }

    #[test]
    fn content_digests_are_sha256() {
        assert_eq!(
            content_digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
