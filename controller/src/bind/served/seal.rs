//! The controller's seal on a served mark (issue #41 item 4): an HMAC, under the approval key
//! derived for marks, of the flow whose mark it is and the mark's whole content (the flow's uid
//! and generation, the object's uid, every digest, the retry fields and the revision). Its
//! digests are SHA-256 of fields the tenant sees, so an unsealed mark could be written by
//! whoever may patch the object: one matching the object's new content (a change then looks
//! served and is skipped), or with its retry fields or revision reset. A mark whose seal does
//! not verify is not believed: the object counts as served, but nothing of what was served
//! ([`Read::Unverified`], docs/decisions.md#bound-flows-recorded-in-the-object). Without an
//! approval key (no key Secret) marks are written and read unsealed, as before seals.

use crate::approval::{sign_in, verify_in, Key};

use super::Mark;

/// The domain marks are sealed in (and their key derived for): no approval, stop or rollout
/// stamp, nor a revision's seal, passes for a mark's, nor a mark's for one of them.
const DOMAIN: &str = "served-mark";

/// What a seal adds to a mark's text: `,"mac":"` and 64 hex characters and `"`.
pub(super) const SEAL_BYTES: usize = 73;

/// How one bound flow's marks are sealed and read: under the controller's approval key (None:
/// unsealed), for the flow `namespace/name` whose annotation key holds them.
#[derive(Debug, Clone, Copy)]
pub struct Sealer<'a> {
    /// The controller's approval key, if it has one.
    pub key: Option<&'a Key>,
    /// The bound flow's namespace and name.
    pub flow: (&'a str, &'a str),
}

/// What an object's mark annotation is worth to a serve of that object.
#[derive(Debug, Clone, PartialEq)]
pub enum Read {
    /// This controller's sealed mark for the object (any mark naming it, without a key).
    Believed(Box<Mark>),
    /// A mark naming the object whose seal does not verify: edited, forged, written before
    /// marks were sealed or under another key. The object was served; what, is not believed.
    Unverified,
    /// No mark: unreadable, or another object's.
    Absent,
}

impl Sealer<'_> {
    /// The annotation's text for `mark`: [`Mark::encode`]'s, with its seal when there is a key
    /// (the whole still within [`super::MAX_MARK_BYTES`]).
    pub fn seal(&self, mark: &Mark) -> String {
        match self.key {
            Some(key) => sign_in(key, DOMAIN, self.flow, &mark.bounded()),
            None => mark.encode(),
        }
    }

    /// What annotation `raw` says of object `object_uid`.
    pub fn read(&self, raw: &str, object_uid: &str) -> Read {
        let Some(key) = self.key else {
            return Mark::decode(raw, object_uid)
                .map_or(Read::Absent, |m| Read::Believed(Box::new(m)));
        };
        let sealed: Option<Mark> = verify_in(key, DOMAIN, self.flow, raw);
        match sealed {
            Some(m) if m.object_uid == object_uid => Read::Believed(Box::new(m)),
            _ if Mark::decode(raw, object_uid).is_some() => Read::Unverified,
            _ => Read::Absent,
        }
    }

    /// The mark a serve of object `object_uid` goes by: the believed one, or for an unverified
    /// one a mark that records nothing ([`Mark::unverified`]: the object is served again as an
    /// update naming every field, with no retry schedule and no revision of its own).
    pub fn open(&self, raw: &str, object_uid: &str) -> Option<Mark> {
        match self.read(raw, object_uid) {
            Read::Believed(m) => Some(*m),
            Read::Unverified => Some(Mark::unverified(object_uid)),
            Read::Absent => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use pseudoflow_crd::bind::Bind;
    use serde_json::{json, Value};

    use super::*;
    use crate::bind::served::{trigger, MAX_MARK_BYTES};

    fn key(c: &str) -> Key {
        Key::new(c.repeat(32)).unwrap()
    }

    fn bind() -> Bind {
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Gadget"})).unwrap()
    }

    fn object(uid: &str, generation: i64, size: i64) -> Value {
        json!({"metadata": {"name": "g", "uid": uid, "generation": generation},
            "spec": {"size": size}})
    }

    /// A failed run's mark: every field a tenant would want to reset is set.
    fn failed_mark(uid: &str) -> Mark {
        let mut m = Mark::of("flow-1", 3, &object(uid, 2, 1), &bind());
        m.failed = true;
        m.failures = 5;
        m.failed_at = 1_700_000_000;
        m.retry_trigger = Some(json!({"event": "create", "changed": []}));
        m.revision = Some("h1".into());
        m.served_at = 1_700_000_000;
        m
    }

    #[test]
    fn a_sealed_mark_reads_back_as_written_for_its_object_and_flow() {
        let k = key("k");
        let s = Sealer {
            key: Some(&k),
            flow: ("ops", "gadgets"),
        };
        let m = failed_mark("u1");
        let raw = s.seal(&m);
        assert_eq!(raw.len(), m.encode().len() + SEAL_BYTES, "{raw}");
        assert_eq!(s.read(&raw, "u1"), Read::Believed(Box::new(m.clone())));
        assert_eq!(s.open(&raw, "u1"), Some(m));
    }

    /// Attack: a tenant edits any byte of their object's sealed mark (a digest to match new
    /// content, `n`/`t`/`p` to reset the retry schedule, `v` to pin a revision, the seal
    /// itself): it is never believed.
    #[test]
    fn attack_a_sealed_mark_with_any_byte_changed_is_not_believed() {
        let k = key("k");
        let s = Sealer {
            key: Some(&k),
            flow: ("ops", "gadgets"),
        };
        let raw = s.seal(&failed_mark("u1"));
        for i in 0..raw.len() {
            let mut bytes = raw.clone().into_bytes();
            bytes[i] = if bytes[i] == b'1' { b'2' } else { b'1' };
            let edited = String::from_utf8(bytes).unwrap();
            let read = s.read(&edited, "u1");
            assert!(
                matches!(read, Read::Unverified | Read::Absent),
                "byte {i}: {edited} read as {read:?}"
            );
        }
        // The edit a tenant would make, re-encoded whole with the seal left as it was.
        let mut forged: Value = serde_json::from_str(&raw).unwrap();
        forged["n"] = json!(1);
        let forged = forged.to_string();
        assert_eq!(s.read(&forged, "u1"), Read::Unverified);
        let opened = s.open(&forged, "u1").unwrap();
        assert_eq!(
            (opened.failures, opened.failed, opened.revision),
            (0, false, None)
        );
    }

    /// Attack: a mark copied from another object, another flow or made under another key
    /// (as it is, or with its object's uid rewritten) is not this object's sealed mark.
    #[test]
    fn attack_another_objects_flows_or_keys_mark_is_not_believed() {
        let (k, other) = (key("k"), key("o"));
        let s = Sealer {
            key: Some(&k),
            flow: ("ops", "gadgets"),
        };
        let theirs = s.seal(&failed_mark("uB"));
        assert_eq!(s.read(&theirs, "uA"), Read::Absent, "another object's");
        let rewritten = theirs.replace("\"uB\"", "\"uA\"");
        assert_eq!(
            s.read(&rewritten, "uA"),
            Read::Unverified,
            "its uid rewritten"
        );
        let elsewhere = Sealer {
            flow: ("ops", "widgets"),
            ..s
        };
        let ours = elsewhere.seal(&failed_mark("uA"));
        assert_eq!(s.read(&ours, "uA"), Read::Unverified, "another flow's");
        let rekeyed = Sealer {
            key: Some(&other),
            ..s
        };
        let ours = rekeyed.seal(&failed_mark("uA"));
        assert_eq!(s.read(&ours, "uA"), Read::Unverified, "another key's");
        assert_eq!(s.read("{not json", "uA"), Read::Absent);
    }

    /// Unsealed marks (a controller without a key writes them; one before seals wrote them)
    /// are believed only by a controller without a key; a keyed one serves the object again,
    /// as an update naming every field (not as new: create-only steps do not run again).
    #[test]
    fn an_unsealed_mark_is_believed_only_without_a_key() {
        let k = key("k");
        let keyed = Sealer {
            key: Some(&k),
            flow: ("ops", "gadgets"),
        };
        let keyless = Sealer { key: None, ..keyed };
        let m = failed_mark("u1");
        let unsealed = keyless.seal(&m);
        assert_eq!(unsealed, m.encode());
        assert_eq!(
            keyless.read(&unsealed, "u1"),
            Read::Believed(Box::new(m.clone()))
        );
        assert_eq!(keyless.read(&unsealed, "u2"), Read::Absent);
        assert_eq!(keyed.read(&unsealed, "u1"), Read::Unverified);
        // A sealed mark read by a controller that lost its key: believed, as any mark is.
        assert_eq!(
            keyless.read(&keyed.seal(&m), "u1"),
            Read::Believed(Box::new(m))
        );
        // The object as its mark recorded it: unverified, it runs again, told every field.
        let opened = keyed.open(&unsealed, "u1").unwrap();
        let t = trigger(Some(&opened), ("flow-1", 3), &object("u1", 2, 1), &bind());
        assert_eq!(t, Some(json!({"event": "update", "changed": [".spec"]})));
        let nothing = json!({"metadata": {"name": "g", "uid": "u1"}});
        let t = trigger(Some(&opened), ("flow-1", 3), &nothing, &bind());
        assert_eq!(t, Some(json!({"event": "update", "changed": []})));
    }

    #[test]
    fn a_sealed_mark_over_the_cap_stays_within_it() {
        let k = key("k");
        let s = Sealer {
            key: Some(&k),
            flow: ("ops", "gadgets"),
        };
        let many: serde_json::Map<String, Value> =
            (0..1000).map(|i| (format!("k{i}"), json!(i))).collect();
        let big = json!({"metadata": {"name": "g", "uid": "u1", "generation": 1},
            "spec": Value::Object(many)});
        let m = Mark::of("flow-1", 1, &big, &bind());
        let raw = s.seal(&m);
        assert!(raw.len() <= MAX_MARK_BYTES, "{}", raw.len());
        let Read::Believed(back) = s.read(&raw, "u1") else {
            panic!("not believed: {raw}")
        };
        assert!(back.fields.is_none(), "cut");
    }
}
