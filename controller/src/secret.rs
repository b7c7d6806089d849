//! Random secrets the controller keeps in run state (see `StoredRun::secret`).

/// 32 random bytes from the operating system, as hex.
pub fn random_hex() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the operating system provides randomness");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_are_long_and_differ() {
        let (a, b) = (super::random_hex(), super::random_hex());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
