//! The REVISION column of `get` of a bound flow (docs/bound-flows.md#revisions): each object's
//! record names the hash of the revision that last served it; the flow's status lists its
//! revisions (`status.bound.revisions`, names ending with the hash) with their numbers.

use std::collections::BTreeMap;

use pseudoflow_crd::PseudoFlowStatus;

use crate::escape::printable;

/// Hex characters of a hash shown for a revision the status does not list.
const SHORT_HASH: usize = 10;

/// The revision numbers the flow's status knows, by hash.
pub struct RevisionNumbers(BTreeMap<String, i64>);

impl RevisionNumbers {
    /// The numbers of the revisions in `st` (`<flow>-<hash>` names).
    pub fn of(st: &PseudoFlowStatus) -> RevisionNumbers {
        let listed = st.bound.iter().flat_map(|b| &b.revisions);
        let by_hash = listed
            .filter_map(|r| Some((r.name.rsplit_once('-')?.1.to_string(), r.revision)))
            .collect();
        RevisionNumbers(by_hash)
    }

    /// What the column shows for a record naming `hash`: its number, else the hash cut short
    /// (a revision pruned, or a status not yet written), else `-` (served before revisions).
    /// The hash is written by whoever may edit the object: no escape reaches the terminal.
    pub fn shown(&self, hash: Option<&str>) -> String {
        match hash.filter(|h| !h.is_empty()) {
            Some(h) => match self.0.get(h) {
                Some(n) => n.to_string(),
                None => printable(&h.chars().take(SHORT_HASH).collect::<String>()),
            },
            None => "-".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_record_shows_its_revisions_number_else_its_hash_cut_short_else_a_dash() {
        let st: PseudoFlowStatus = serde_json::from_value(json!({"bound": {
            "objects": 2, "creating": 0, "running": 2, "failed": 0,
            "revisions": [{"revision": 3, "name": "my-flow-abc123", "objects": 2}]}}))
        .unwrap();
        let n = RevisionNumbers::of(&st);
        assert_eq!(n.shown(Some("abc123")), "3");
        assert_eq!(n.shown(Some("0123456789abcdef")), "0123456789");
        assert_eq!(n.shown(Some("\u{1b}]0;x")), "\\u{1b}]0;x");
        assert_eq!(n.shown(None), "-");
        assert_eq!(n.shown(Some("")), "-");
    }
}
