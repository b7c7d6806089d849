//! A segment Job's journal: the result of each step of a fused segment, recorded by the
//! executor as soon as the step ends, in a ConfigMap `<job>-journal` (key [`JOURNAL_KEY`]).
//! The controller reads it to show progress while the Job runs; a replacement pod of the same
//! Job reads it to resume after the last recorded step, so a step that ended is never run
//! again. ConfigMaps can be written by anyone who may write ConfigMaps in the namespace and read
//! by anyone with `view`, so every entry is sealed ([`super::sealed`]) under a key only the
//! Job's input Secret holds ([`super::names::journal_key`]): its variables cannot be read
//! there, and an entry that does not open counts as never written.

use serde::{Deserialize, Serialize};

use super::result::MemberResult;
use super::sealed::{open, seal};

/// Key of the journal document in its ConfigMap.
pub const JOURNAL_KEY: &str = "journal.json";
/// Label on journal ConfigMaps, so the controller can watch them (value [`JOURNAL_ROLE`]).
pub const LABEL_ROLE: &str = "ops.example.com/role";
/// Value of [`LABEL_ROLE`] on journal ConfigMaps.
pub const JOURNAL_ROLE: &str = "segment-journal";

/// The journal ConfigMap's name for Job `job`.
pub fn journal_name(job: &str) -> String {
    format!("{job}-journal")
}

/// One recorded step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The step's result, in memory only (stored sealed).
    #[serde(skip)]
    pub member: MemberResult,
    /// The member's JSON sealed for the Job under its journal key (base64).
    pub sealed: String,
    /// The member's plan node id, in the clear: what `kubectl pf get` shows the Job against
    /// (never trusted by the controller, which reads only what opens).
    #[serde(default)]
    pub node: String,
}

/// Seals `member` for Job `job` under `key`.
pub fn sign(key: &str, job: &str, member: MemberResult) -> Entry {
    let json = serde_json::to_vec(&member).expect("results serialise");
    let sealed = seal(key, job, &json);
    let node = member.node_id.clone();
    Entry {
        member,
        sealed,
        node,
    }
}

/// The entries of a journal document that open for Job `job` under `key`, in order, up to the
/// first one that does not (what follows a forged or damaged entry is not trusted either).
pub fn verified(key: &str, job: &str, document: &str) -> Vec<MemberResult> {
    let Ok(entries) = serde_json::from_str::<Vec<Entry>>(document) else {
        return Vec::new();
    };
    entries
        .into_iter()
        .map_while(|e| {
            let bytes = open(key, job, &e.sealed).ok()?;
            serde_json::from_slice(&bytes).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::StepResult;

    fn member(node: &str) -> MemberResult {
        MemberResult {
            node_id: node.into(),
            result: StepResult::succeeded(true, "applied"),
            started_ms: 1,
            finished_ms: 2,
        }
    }

    #[test]
    fn only_entries_signed_with_the_jobs_key_for_this_job_count() {
        let key = crate::protocol::names::journal_key("run-secret", "job-a");
        let doc = serde_json::to_string(&vec![sign(&key, "job-a", member("s0"))]).unwrap();
        assert_eq!(verified(&key, "job-a", &doc), vec![member("s0")]);
        // The same entry replayed into another Job's journal does not count there.
        assert!(verified(&key, "job-b", &doc).is_empty());
        // Nor with another key (a ConfigMap writer cannot know the key).
        assert!(verified("guess", "job-a", &doc).is_empty());
        // What `view` reads in the ConfigMap is not the result.
        assert!(!doc.contains("applied"), "{doc}");
    }

    #[test]
    fn a_changed_entry_and_everything_after_it_is_dropped() {
        let key = "k";
        let mut entries = vec![
            sign(key, "j", member("s0")),
            sign(key, "j", member("s1")),
            sign(key, "j", member("s2")),
        ];
        entries[1].sealed = sign("other", "j", member("s1")).sealed;
        let doc = serde_json::to_string(&entries).unwrap();
        assert_eq!(verified(key, "j", &doc), vec![member("s0")]);
        assert!(verified(key, "j", "not json").is_empty());
    }
}
