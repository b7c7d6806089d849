//! Run state is tamper-evident. The run-state Secret sits in the flow's namespace, where anyone
//! with the `edit` role may rewrite it; so the controller seals what it stores: an HMAC-SHA256
//! over the run document, the flow's namespace, name and uid, and a sequence number, under a key
//! only the controller reads ([`RunStateKey`]). A state whose seal does not verify, or whose
//! sequence is lower than one the controller already stored (an older valid state replayed),
//! is never driven (docs/decisions.md, "Run state is sealed").

use std::collections::HashMap;
use std::sync::Mutex;

use pseudoflow_crd::protocol::names::{mac_hex, mac_ok};

use crate::approval::Key;
use crate::flow::Error;

/// The Secret holding the run-state key of a controller without an approval key (tests, a
/// controller without POD_NAMESPACE): made on first use, in POD_NAMESPACE or `kube-system`
/// (where namespace editors have no rights, unlike `default`).
pub const KEY_SECRET: &str = "pseudoflow-run-state-key";

/// Which flow object a run state belongs to: all of it is sealed, so a state copied from
/// another flow (or an earlier flow of the same name) does not verify.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// The flow's namespace.
    pub namespace: &'a str,
    /// The flow's name.
    pub name: &'a str,
    /// The flow object's uid.
    pub uid: &'a str,
}

fn sealed_bytes(owner: Owner, seq: u64, doc: &[u8]) -> Vec<u8> {
    let Owner {
        namespace,
        name,
        uid,
    } = owner;
    let mut bytes =
        format!("pseudoflow-run-state\0{namespace}\0{name}\0{uid}\0{seq}\0").into_bytes();
    bytes.extend_from_slice(doc);
    bytes
}

/// The seal (hex HMAC) of run document `doc` stored as `owner`'s state number `seq`.
pub fn seal(key: &Key, owner: Owner, seq: u64, doc: &[u8]) -> String {
    mac_hex(key.text(), &sealed_bytes(owner, seq, doc))
}

/// Whether `mac` is the seal of `doc` as `owner`'s state number `seq` (constant time).
pub fn verify(key: &Key, owner: Owner, seq: u64, doc: &[u8], mac: &str) -> bool {
    mac_ok(key.text(), &sealed_bytes(owner, seq, doc), mac)
}

/// The highest run-state sequence number the controller has stored or seen verified, per flow
/// uid: with `status.runStateSequence` (kept across restarts), the floor below which a stored
/// state is a replay.
#[derive(Debug, Default)]
pub struct Sequences(Mutex<HashMap<String, u64>>);

impl Sequences {
    /// Raises the floor of `uid` to `seq`; returns the floor now.
    pub fn raise(&self, uid: &str, seq: u64) -> u64 {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let floor = map.entry(uid.to_string()).or_default();
        *floor = (*floor).max(seq);
        *floor
    }

    /// The floor of `uid` (0 when nothing is known).
    pub fn get(&self, uid: &str) -> u64 {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(uid).copied().unwrap_or_default()
    }

    /// Forgets `uid` (its flow object is gone).
    pub fn forget(&self, uid: &str) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(uid);
    }
}

/// The key run state is sealed with: derived from the approval key when the controller has one
/// (the chart's), else the key in Secret [`KEY_SECRET`] in the controller's namespace (or
/// `kube-system`), made on first use. Never absent: without a key no run state is stored or
/// driven.
#[derive(Debug, Default)]
pub struct RunStateKey(tokio::sync::OnceCell<Key>);

impl RunStateKey {
    /// The key derived from the approval key `key`.
    pub fn from_approval(key: &Key) -> Self {
        RunStateKey(tokio::sync::OnceCell::new_with(Some(
            key.derive("run-state"),
        )))
    }

    /// The key; loaded (or made) on first use when it was not derived.
    pub async fn get(&self, client: &kube::Client) -> Result<&Key, Error> {
        self.0
            .get_or_try_init(|| async {
                let ns = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "kube-system".into());
                tracing::warn!(
                    "no approval key: run state is sealed with the key in Secret \
                     {ns}/{KEY_SECRET} (made now if missing)"
                );
                Key::load_or_create_in(client, &ns, KEY_SECRET)
                    .await
                    .map_err(|e| Error::RunStateKey(format!("{ns}/{KEY_SECRET}: {e}")))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: Owner = Owner {
        namespace: "team",
        name: "f",
        uid: "u1",
    };

    #[test]
    fn a_seal_verifies_only_for_its_document_owner_sequence_and_key() {
        let key = Key::random();
        let mac = seal(&key, OWNER, 3, b"{}");
        assert!(verify(&key, OWNER, 3, b"{}", &mac));
        assert!(!verify(&key, OWNER, 3, b"{ }", &mac), "another document");
        assert!(!verify(&key, OWNER, 4, b"{}", &mac), "another sequence");
        let other = Owner { uid: "u2", ..OWNER };
        assert!(!verify(&key, other, 3, b"{}", &mac), "another flow object");
        assert!(
            !verify(&Key::random(), OWNER, 3, b"{}", &mac),
            "another key"
        );
        assert!(!verify(&key, OWNER, 3, b"{}", "not hex"));
    }

    #[test]
    fn the_floor_only_rises() {
        let s = Sequences::default();
        assert_eq!(s.get("u"), 0);
        assert_eq!(s.raise("u", 5), 5);
        assert_eq!(s.raise("u", 2), 5);
        assert_eq!(s.get("u"), 5);
        s.forget("u");
        assert_eq!(s.get("u"), 0);
    }

    #[test]
    fn a_derived_key_differs_from_its_root() {
        let root = Key::random();
        let derived = root.derive("run-state");
        assert_ne!(derived, root);
        assert_eq!(derived, root.derive("run-state"));
        assert_ne!(derived, root.derive("other"));
    }
}
