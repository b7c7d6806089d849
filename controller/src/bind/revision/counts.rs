//! The objects of a bound flow counted per revision, for `status.bound.revisions`, and which old
//! revisions its history limit prunes. Pure.

use std::collections::BTreeMap;

use pseudoflow_crd::status::{RevisionCount, MAX_REVISIONS_SHOWN};

use super::history::Revision;

/// The revisions that serve an object or are current, newest first, each with its objects
/// (`by_hash`: objects per revision hash; a hash no revision has is not listed).
pub fn listed(
    all: &[Revision],
    current: Option<&str>,
    by_hash: &BTreeMap<String, u32>,
) -> Vec<RevisionCount> {
    let mut out: Vec<RevisionCount> = all
        .iter()
        .filter_map(|r| {
            let objects = by_hash.get(&r.hash).copied().unwrap_or(0);
            let shown = objects > 0 || Some(r.hash.as_str()) == current;
            shown.then(|| RevisionCount {
                revision: r.number,
                name: r.name.clone(),
                objects,
            })
        })
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.revision));
    out.truncate(MAX_REVISIONS_SHOWN);
    out
}

/// The old revisions to delete so that at most `limit` stay besides the current one, oldest
/// first, never one that still serves an object (as a DaemonSet keeps the revisions of its
/// live pods).
pub fn pruned<'a>(
    all: &'a [Revision],
    current: Option<&str>,
    by_hash: &BTreeMap<String, u32>,
    limit: u32,
) -> Vec<&'a Revision> {
    let mut old: Vec<&Revision> = all
        .iter()
        .filter(|r| Some(r.hash.as_str()) != current)
        .collect();
    old.sort_by_key(|r| r.number);
    let excess = old.len().saturating_sub(limit as usize);
    old.into_iter()
        .filter(|r| by_hash.get(&r.hash).copied().unwrap_or(0) == 0)
        .take(excess)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(n: i64) -> Revision {
        Revision {
            name: format!("f-h{n}"),
            number: n,
            hash: format!("h{n}"),
            uid: format!("u{n}"),
        }
    }

    #[test]
    fn revisions_serving_objects_and_the_current_one_are_listed_newest_first() {
        let all: Vec<Revision> = (1..=4).map(rev).collect();
        let by_hash: BTreeMap<String, u32> =
            [("h1".into(), 2), ("h3".into(), 5), ("gone".into(), 1)].into();
        let l = listed(&all, Some("h4"), &by_hash);
        let got: Vec<(i64, u32)> = l.iter().map(|c| (c.revision, c.objects)).collect();
        assert_eq!(got, [(4, 0), (3, 5), (1, 2)]);
        assert_eq!(l[0].name, "f-h4");
    }

    #[test]
    fn the_oldest_unused_revisions_past_the_limit_go_never_the_current_or_a_serving_one() {
        let all: Vec<Revision> = [3, 1, 4, 2, 5].into_iter().map(rev).collect();
        let none = BTreeMap::new();
        let names = |v: Vec<&Revision>| v.iter().map(|r| r.number).collect::<Vec<_>>();
        assert_eq!(names(pruned(&all, Some("h5"), &none, 2)), [1, 2]);
        assert_eq!(
            names(pruned(&all, Some("h5"), &none, 10)),
            Vec::<i64>::new()
        );
        assert_eq!(names(pruned(&all, Some("h1"), &none, 0)), [2, 3, 4, 5]);
        let serving: BTreeMap<String, u32> = [("h1".into(), 1)].into();
        assert_eq!(names(pruned(&all, Some("h5"), &serving, 2)), [2, 3]);
    }
}
