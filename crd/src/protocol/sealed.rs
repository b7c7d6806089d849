//! Sealing what an executor reports (its result, its journal entries) so that only who can
//! read Secrets can read it: a result carries the step's variables, which may hold values read
//! from Secrets, and it travels through places `view` reaches (a pod's termination message, a
//! ConfigMap). ChaCha20-Poly1305 under a key derived from the run's secret (kept in the
//! run-state Secret, handed to each Job in its input Secret); the Job's name is the associated
//! data, so a sealed result of one Job does not open as another's. Opening also authenticates:
//! what does not open was not written by a holder of the key.

use k8s_openapi::ByteString;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use super::names::sha256_hex;

/// Why a sealed text did not open.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OpenError {
    /// Not base64, or shorter than a nonce and a tag.
    #[error("the sealed text is malformed")]
    Malformed,
    /// The tag does not verify: another key, another Job, or changed bytes.
    #[error("the sealed text does not open under this Job's key (written by something else, or changed)")]
    Forged,
}

/// The key Job `job_name` seals its result with: derived from the run's secret, so it is in
/// the Job's input Secret and the run-state Secret only.
pub fn result_key(run_secret: &str, job_name: &str) -> String {
    sha256_hex(&["pseudoflow-result", run_secret, job_name])
}

fn aead_key(key: &str) -> LessSafeKey {
    let bytes = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let unbound = UnboundKey::new(&CHACHA20_POLY1305, bytes.as_ref()).expect("32-byte key");
    LessSafeKey::new(unbound)
}

/// `plaintext` sealed under `key` for `job`, as base64 (a random nonce, then the ciphertext
/// and its tag).
pub fn seal(key: &str, job: &str, plaintext: &[u8]) -> String {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .expect("the operating system provides randomness");
    let mut buf = plaintext.to_vec();
    aead_key(key)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(job.as_bytes()),
            &mut buf,
        )
        .expect("sealing cannot fail for inputs this size");
    let mut out = nonce.to_vec();
    out.extend(buf);
    match serde_json::to_value(ByteString(out)).expect("bytes serialise") {
        serde_json::Value::String(s) => s,
        other => unreachable!("ByteString serialises as a string, not {other}"),
    }
}

/// What [`seal`] sealed under `key` for `job`.
pub fn open(key: &str, job: &str, sealed: &str) -> Result<Vec<u8>, OpenError> {
    let ByteString(mut bytes) =
        serde_json::from_value(serde_json::Value::String(sealed.to_string()))
            .map_err(|_| OpenError::Malformed)?;
    if bytes.len() < NONCE_LEN + CHACHA20_POLY1305.tag_len() {
        return Err(OpenError::Malformed);
    }
    let mut body = bytes.split_off(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(&bytes).map_err(|_| OpenError::Malformed)?;
    let plain = aead_key(key)
        .open_in_place(nonce, Aad::from(job.as_bytes()), &mut body)
        .map_err(|_| OpenError::Forged)?;
    Ok(plain.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_text_opens_only_under_its_key_and_job_and_hides_the_plaintext() {
        let key = result_key("run-secret", "job-a");
        let sealed = seal(&key, "job-a", b"canary-value");
        assert!(!sealed.contains("canary"), "{sealed}");
        assert_eq!(open(&key, "job-a", &sealed).unwrap(), b"canary-value");
        assert_eq!(open(&key, "job-b", &sealed), Err(OpenError::Forged));
        let other = result_key("other-secret", "job-a");
        assert_eq!(open(&other, "job-a", &sealed), Err(OpenError::Forged));
        assert_eq!(open(&key, "job-a", "!!"), Err(OpenError::Malformed));
        assert_eq!(open(&key, "job-a", "AAAA"), Err(OpenError::Malformed));
        // Two seals of one text differ (random nonces).
        assert_ne!(seal(&key, "job-a", b"x"), seal(&key, "job-a", b"x"));
    }
}
