//! The controller's seal on the ControllerRevisions it makes: an HMAC, under the approval key
//! derived for revisions, of the flow they belong to and their hash. A revision's data is the
//! spec its objects are served with (an object not yet reached by a rollout is served with the
//! revision its record names, and a tenant may edit that record), so a ControllerRevision
//! planted in the flow's namespace by whoever may create them, naming the flow as its owner and
//! with a hash label consistent with its data, must never be taken for one of the flow's:
//! without the seal it is not (docs/security.md).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::approval::{sign_in, verify_in, Key};

/// The annotation holding a revision's seal.
pub const SEAL_ANNOTATION: &str = "ops.example.com/revision-seal";

/// What a seal vouches for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Sealed {
    /// The flow's uid.
    flow: String,
    /// The revision's hash.
    hash: String,
}

/// The domain seals are made in (and their key derived for): no approval, stop or rollout stamp
/// passes for one.
const DOMAIN: &str = "revision";

/// The seal of flow `namespace/name` (uid `flow_uid`)'s revision `hash`.
pub fn seal(key: &Key, (namespace, name): (&str, &str), flow_uid: &str, hash: &str) -> String {
    let sealed = Sealed {
        flow: flow_uid.into(),
        hash: hash.into(),
    };
    sign_in(key, DOMAIN, (namespace, name), &sealed)
}

/// Whether `annotations` carry this controller's seal of flow `namespace/name` (uid
/// `flow_uid`)'s revision `hash`.
pub fn is_sealed(
    key: &Key,
    (namespace, name): (&str, &str),
    flow_uid: &str,
    hash: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(value) = annotations.and_then(|a| a.get(SEAL_ANNOTATION)) else {
        return false;
    };
    let found: Option<Sealed> = verify_in(key, DOMAIN, (namespace, name), value);
    found.is_some_and(|s| s.flow == flow_uid && s.hash == hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attack: a seal copied from another revision, another flow (of the same name, or another
    /// name), or made under another key does not seal this one.
    #[test]
    fn attack_a_seal_holds_only_for_its_flow_and_hash_under_this_key() {
        let key = Key::new("k".repeat(32)).unwrap();
        let at = ("ns", "widgets");
        let value = seal(&key, at, "uid-1", "h1");
        let with = |v: &str| {
            Some(BTreeMap::from([(
                SEAL_ANNOTATION.to_string(),
                v.to_string(),
            )]))
        };
        assert!(is_sealed(&key, at, "uid-1", "h1", with(&value).as_ref()));
        assert!(
            !is_sealed(&key, at, "uid-1", "h2", with(&value).as_ref()),
            "another hash"
        );
        assert!(
            !is_sealed(&key, at, "uid-2", "h1", with(&value).as_ref()),
            "another flow"
        );
        let elsewhere = ("ns", "gadgets");
        assert!(!is_sealed(
            &key,
            elsewhere,
            "uid-1",
            "h1",
            with(&value).as_ref()
        ));
        let other = Key::new("o".repeat(32)).unwrap();
        assert!(
            !is_sealed(&other, at, "uid-1", "h1", with(&value).as_ref()),
            "another key"
        );
        assert!(!is_sealed(&key, at, "uid-1", "h1", None), "none");
        let forged = value.replace("h1", "h2");
        assert!(
            !is_sealed(&key, at, "uid-1", "h2", with(&forged).as_ref()),
            "edited"
        );
    }

    /// A seal made by a controller before seals and stamps shared one helper
    /// (`crate::approval::sign_in`): revisions sealed then must stay sealed.
    #[test]
    fn a_seal_made_before_still_holds_byte_for_byte() {
        let key = Key::new("k".repeat(32)).unwrap();
        let at = ("ns", "widgets");
        assert_eq!(seal(&key, at, "uid-1", "h1"), PINNED);
        let annotations = BTreeMap::from([(SEAL_ANNOTATION.to_string(), PINNED.to_string())]);
        assert!(is_sealed(&key, at, "uid-1", "h1", Some(&annotations)));
    }

    /// Computed with the code before the shared helper.
    const PINNED: &str = r#"{"flow":"uid-1","hash":"h1","mac":"baf59fdb4920be808a7cd85c8cae8efbf400e13d677af6b03432990db5ae2023"}"#;
}
