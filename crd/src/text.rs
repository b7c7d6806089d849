//! Small string helpers every other module may use and which use nothing of this crate: joining
//! diagnostic paths, "did you mean" suggestions, and the shapes of Kubernetes names. A leaf, so
//! the modules using it import no loop.

/// Joins a path and a field: `spec.steps[0]` + `then` → `spec.steps[0].then`.
pub fn join(path: &str, field: &str) -> String {
    match (path.is_empty(), field.is_empty()) {
        (_, true) => path.to_string(),
        (true, false) => field.to_string(),
        (false, false) if field.starts_with('[') => format!("{path}{field}"),
        (false, false) => format!("{path}.{field}"),
    }
}

/// Closest candidate by edit distance, for "did you mean" hints on typos.
pub fn suggest<'a>(input: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = input.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len().max(lower.len()) / 2).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// RFC 1123 label (Namespace, most names): what Kubernetes accepts for a DNS label.
pub fn is_dns_label(s: &str) -> bool {
    bounded_alphanumeric(s, 63, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'
    })
}

/// The shape Kubernetes names share: 1..=`max` bytes, alphanumeric at both ends, `inner` inside.
pub fn bounded_alphanumeric(s: &str, max: usize, inner: impl Fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| inner(*c))
}

/// RFC 1123 subdomain (ConfigMap, ServiceAccount names).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_fields_and_indexes() {
        assert_eq!(join("spec.steps", "[3]"), "spec.steps[3]");
        assert_eq!(join("spec.steps[3]", "then"), "spec.steps[3].then");
        assert_eq!(join("spec", ""), "spec");
    }
}
