//! Who approved, so that nobody can forge it. The approve and reject annotations are written by
//! people (`kubectl annotate`), so they cannot say who wrote them. The mutating admission
//! webhook (`/mutate`, [`crate::webhook::stamp`]) therefore stamps every decision an allowed user
//! makes: the annotation [`APPROVED_BY`] holds the decision, the step, the user and groups the
//! API server authenticated, the time, the run status showed, and an HMAC-SHA256 over all of it
//! and the flow's namespace and name, under a key only the controller holds (the Secret
//! [`KEY_SECRET`] in its namespace). The controller accepts a decision only with a valid stamp
//! for that step, in the run that is waiting, that was not already on the flow when the step
//! began waiting ([`verdict`]); anything else is ignored and the step's message says why.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};
use pseudoflow_crd::protocol::names::{mac_hex, mac_ok};
use pseudoflow_crd::{APPROVE_ANNOTATION, REJECT_ANNOTATION};
use serde::{Deserialize, Serialize};

/// The time now in unix milliseconds, as stamps and waiting steps record it.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// The stamp annotation, written only by the admission webhook.
pub const APPROVED_BY: &str = "ops.example.com/approved-by";
/// The Secret (in the controller's namespace) holding the stamp key.
pub const KEY_SECRET: &str = "pseudoflow-approval-key";
/// The field of [`KEY_SECRET`] holding the key.
pub const KEY_FIELD: &str = "key";

/// The key stamps are signed with (hex).
#[derive(Clone, PartialEq, Eq)]
pub struct Key(String);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key from its text (at least 32 characters).
    pub fn new(text: impl Into<String>) -> Option<Key> {
        let text = text.into();
        (text.len() >= 32).then_some(Key(text))
    }

    /// The key's text, for HMACs of other kinds than stamps (the run state's seal).
    pub(crate) fn text(&self) -> &str {
        &self.0
    }

    /// A fresh random key.
    pub fn random() -> Key {
        Key(crate::secret::random_hex())
    }

    /// A key for another purpose, derived from this one (HMAC of `purpose` under it): the run
    /// state is sealed with `derive("run-state")`, so a stamp can never pass for a seal.
    pub fn derive(&self, purpose: &str) -> Key {
        Key(mac_hex(
            &self.0,
            format!("pseudoflow-key\0{purpose}").as_bytes(),
        ))
    }

    /// The key in Secret `KEY_SECRET` of `namespace`, made and stored first if there is none
    /// (a replica that loses the race to store its own uses the winner's).
    pub async fn load_or_create(client: &kube::Client, namespace: &str) -> anyhow::Result<Key> {
        Key::load_or_create_in(client, namespace, KEY_SECRET).await
    }

    /// The key in Secret `name` (field [`KEY_FIELD`]) of `namespace`, made and stored first if
    /// there is none.
    pub async fn load_or_create_in(
        client: &kube::Client,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<Key> {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let read = |s: &Secret| {
            s.data
                .as_ref()
                .and_then(|d| d.get(KEY_FIELD))
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .and_then(Key::new)
        };
        if let Some(s) = api.get_opt(name).await? {
            return read(&s).ok_or_else(|| anyhow::anyhow!("Secret {name} has no {KEY_FIELD}"));
        }
        let key = Key::random();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                KEY_FIELD.to_string(),
                ByteString(key.0.as_bytes().to_vec()),
            )])),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(key),
            Err(kube::Error::Api(e)) if e.code == 409 => read(&api.get(name).await?)
                .ok_or_else(|| anyhow::anyhow!("Secret {name} has no {KEY_FIELD}")),
            Err(e) => Err(e.into()),
        }
    }
}

/// Approve or reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Decision {
    /// The run goes on.
    Approve,
    /// The run fails.
    Reject,
}

impl Decision {
    /// The annotation that makes this decision.
    pub fn annotation(self) -> &'static str {
        match self {
            Decision::Approve => APPROVE_ANNOTATION,
            Decision::Reject => REJECT_ANNOTATION,
        }
    }
}

/// What the webhook vouches for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stamp {
    /// Approve or reject.
    pub decision: Decision,
    /// The step the decision names.
    pub step: String,
    /// The user the API server authenticated.
    pub user: String,
    /// Their groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// When the webhook admitted the decision (unix milliseconds, its replica's clock): shown in
    /// status, never compared with the controller's clock (see [`Waiting::stale`]).
    pub time: i64,
    /// The run id status showed then ("" if none).
    #[serde(default)]
    pub run: String,
}

/// A stamp as an annotation holds it: its fields, then its HMAC.
#[derive(Serialize, Deserialize)]
struct Signed<T> {
    #[serde(flatten)]
    stamp: T,
    mac: String,
}

/// What a stamp's HMAC covers: its kind (`domain`), the flow it is for, and the stamp.
fn signed_bytes<T: Serialize>(domain: &str, namespace: &str, name: &str, stamp: &T) -> Vec<u8> {
    let mut bytes = format!("pseudoflow-{domain}\0{namespace}\0{name}\0").into_bytes();
    bytes.extend(serde_json::to_vec(stamp).expect("stamps serialise"));
    bytes
}

/// The annotation value of a `domain` stamp for flow `namespace/name`: the stamp with its HMAC
/// under `key` (approvals' under the key itself, other kinds' through [`sign_in`]).
fn sign_stamp<T: Serialize + Clone>(
    key: &Key,
    domain: &str,
    (namespace, name): (&str, &str),
    stamp: &T,
) -> String {
    let mac = mac_hex(&key.0, &signed_bytes(domain, namespace, name, stamp));
    let signed = Signed {
        stamp: stamp.clone(),
        mac,
    };
    serde_json::to_string(&signed).expect("stamps serialise")
}

/// The `domain` stamp in `value` if its HMAC under `key` is valid for flow `namespace/name`.
fn verify_stamp<T: Serialize + serde::de::DeserializeOwned>(
    key: &Key,
    domain: &str,
    (namespace, name): (&str, &str),
    value: &str,
) -> Option<T> {
    let signed: Signed<T> = serde_json::from_str(value).ok()?;
    let bytes = signed_bytes(domain, namespace, name, &signed.stamp);
    mac_ok(&key.0, &bytes, &signed.mac).then_some(signed.stamp)
}

/// [`sign_stamp`] under the key derived for `domain` (`key.derive(domain)`): a kind of stamp
/// other than approvals' (stops', rollout actions', revision seals') has a key of its own, so no
/// stamp of one kind, nor an approval, passes for another even where its fields would fit.
pub(crate) fn sign_in<T: Serialize + Clone>(
    key: &Key,
    domain: &str,
    at: (&str, &str),
    stamp: &T,
) -> String {
    sign_stamp(&key.derive(domain), domain, at, stamp)
}

/// [`verify_stamp`] under the key derived for `domain`: the stamp [`sign_in`] made, if valid.
pub(crate) fn verify_in<T: Serialize + serde::de::DeserializeOwned>(
    key: &Key,
    domain: &str,
    at: (&str, &str),
    value: &str,
) -> Option<T> {
    verify_stamp(&key.derive(domain), domain, at, value)
}

impl Stamp {
    /// The annotation value: the stamp with its HMAC for flow `namespace/name`.
    pub fn sign(&self, key: &Key, namespace: &str, name: &str) -> String {
        sign_stamp(key, "approval", (namespace, name), self)
    }

    /// The stamp in `value` if its HMAC is valid for flow `namespace/name`.
    pub fn verify(key: &Key, namespace: &str, name: &str, value: &str) -> Option<Stamp> {
        verify_stamp(key, "approval", (namespace, name), value)
    }
}

/// What the flow's annotations say about one waiting approval step.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// No decision names this step.
    Undecided,
    /// A decision names it but is not accepted, with why.
    Ignored(String),
    /// Decided, as the stamp records.
    Decided(Stamp),
}

/// The MAC of the stamp in `annotations` (whether or not it verifies), which identifies it:
/// recorded when a step begins waiting, so that stamp never decides that wait.
pub fn stamp_mac(annotations: &BTreeMap<String, String>) -> Option<String> {
    let signed: Signed<Stamp> = serde_json::from_str(annotations.get(APPROVED_BY)?).ok()?;
    Some(signed.mac)
}

/// Where an approval step waits: which flow, step, run, and which stamp was already on the
/// flow when it began waiting.
#[derive(Debug, Clone, Copy)]
pub struct Waiting<'a> {
    /// The flow's namespace.
    pub namespace: &'a str,
    /// The flow's name.
    pub name: &'a str,
    /// The step's name.
    pub step: &'a str,
    /// The run waiting.
    pub run: &'a str,
    /// The MAC of the stamp on the flow when the controller first saw the step waiting ("" if
    /// none: see [`stamp_mac`]).
    pub stale: &'a str,
}

/// The decision on `w` the flow's `annotations` carry, accepted only with a stamp signed under
/// `key` for this flow, step and run, made since the step began waiting (it is not the stamp the
/// controller saw then: no clock is compared, the webhook replica's and the controller's may
/// differ), whose decision's annotation still names the step (removing it withdraws it).
pub fn verdict(key: Option<&Key>, annotations: &BTreeMap<String, String>, w: Waiting) -> Verdict {
    let names = |k: &str| annotations.get(k).is_some_and(|v| v == w.step);
    if !names(APPROVE_ANNOTATION) && !names(REJECT_ANNOTATION) {
        return Verdict::Undecided;
    }
    let set = if names(APPROVE_ANNOTATION) {
        APPROVE_ANNOTATION
    } else {
        REJECT_ANNOTATION
    };
    let ignored = |why: &str| Verdict::Ignored(format!("{set}={} not accepted: {why}", w.step));
    let Some(key) = key else {
        return ignored("the controller has no approval key");
    };
    let Some(value) = annotations.get(APPROVED_BY) else {
        return ignored(&format!(
            "no {APPROVED_BY} stamp (the admission webhook writes it; is it enabled?)"
        ));
    };
    let Some(stamp) = Stamp::verify(key, w.namespace, w.name, value) else {
        return ignored(&format!(
            "the {APPROVED_BY} stamp is not signed by the admission webhook"
        ));
    };
    if stamp.step != w.step || !names(stamp.decision.annotation()) {
        return ignored(&format!(
            "the {APPROVED_BY} stamp records a decision on another step"
        ));
    }
    let stale = stamp_mac(annotations).is_some_and(|mac| mac == w.stale);
    if stamp.run != w.run || stale {
        return ignored(
            "it was made before this run's step began waiting; decide again (kubectl pf \
             approve/reject, or remove the annotation and set it again)",
        );
    }
    Verdict::Decided(stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(decision: Decision, step: &str, run: &str, time: i64) -> Stamp {
        Stamp {
            decision,
            step: step.into(),
            user: "boss".into(),
            groups: vec!["ops".into()],
            time,
            run: run.into(),
        }
    }

    const W: Waiting = Waiting {
        namespace: "team",
        name: "f",
        step: "gate",
        run: "r2",
        stale: "",
    };

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_signed_stamp_for_this_step_and_run_decides() {
        let key = Key::random();
        let s = stamp(Decision::Approve, "gate", "r2", 100);
        let a = ann(&[
            (APPROVE_ANNOTATION, "gate"),
            (APPROVED_BY, &s.sign(&key, "team", "f")),
        ]);
        assert_eq!(verdict(Some(&key), &a, W), Verdict::Decided(s));
        let r = stamp(Decision::Reject, "gate", "r2", 150);
        let a = ann(&[
            (REJECT_ANNOTATION, "gate"),
            (APPROVED_BY, &r.sign(&key, "team", "f")),
        ]);
        assert_eq!(verdict(Some(&key), &a, W), Verdict::Decided(r));
    }

    #[test]
    fn forged_copied_stale_or_withdrawn_stamps_are_ignored() {
        let key = Key::random();
        let ok = stamp(Decision::Approve, "gate", "r2", 100);
        let ignored =
            |a: &BTreeMap<String, String>| matches!(verdict(Some(&key), a, W), Verdict::Ignored(_));
        // No stamp; a stamp signed with another key; one altered after signing.
        assert!(ignored(&ann(&[(APPROVE_ANNOTATION, "gate")])));
        let other = ok.sign(&Key::random(), "team", "f");
        assert!(ignored(&ann(&[
            (APPROVE_ANNOTATION, "gate"),
            (APPROVED_BY, &other)
        ])));
        let altered = ok
            .sign(&key, "team", "f")
            .replace("\"boss\"", "\"mallory\"");
        assert!(ignored(&ann(&[
            (APPROVE_ANNOTATION, "gate"),
            (APPROVED_BY, &altered)
        ])));
        // Copied from another flow.
        let copied = ok.sign(&key, "team", "g");
        assert!(ignored(&ann(&[
            (APPROVE_ANNOTATION, "gate"),
            (APPROVED_BY, &copied)
        ])));
        // From an earlier run.
        let a = ann(&[
            (APPROVE_ANNOTATION, "gate"),
            (
                APPROVED_BY,
                &stamp(Decision::Approve, "gate", "r1", 100).sign(&key, "team", "f"),
            ),
        ]);
        assert!(ignored(&a));
        // A stamp for another step, or a reject stamp beside an approve annotation.
        let other_step = stamp(Decision::Approve, "other", "r2", 100).sign(&key, "team", "f");
        assert!(ignored(&ann(&[
            (APPROVE_ANNOTATION, "gate"),
            (APPROVED_BY, &other_step)
        ])));
        let rej = stamp(Decision::Reject, "gate", "r2", 100).sign(&key, "team", "f");
        assert!(ignored(&ann(&[
            (APPROVE_ANNOTATION, "gate"),
            (APPROVED_BY, &rej)
        ])));
        // Without a key nothing is accepted.
        let a = ann(&[
            (APPROVE_ANNOTATION, "gate"),
            (APPROVED_BY, &ok.sign(&key, "team", "f")),
        ]);
        assert!(matches!(verdict(None, &a, W), Verdict::Ignored(_)));
    }

    #[test]
    fn the_stamp_on_the_flow_when_the_step_began_waiting_never_decides_it_whatever_its_time() {
        let key = Key::random();
        // Stamped by a replica whose clock runs an hour ahead of the controller's.
        let ahead = stamp(Decision::Approve, "gate", "r2", 3_600_100);
        let a = ann(&[
            (APPROVE_ANNOTATION, "gate"),
            (APPROVED_BY, &ahead.sign(&key, "team", "f")),
        ]);
        let seen = stamp_mac(&a).unwrap();
        let w = Waiting { stale: &seen, ..W };
        assert!(matches!(
            verdict(Some(&key), &a, w),
            Verdict::Ignored(why) if why.contains("before this run's step began waiting")
        ));
        // A new decision made while it waits, by a replica whose clock runs an hour behind,
        // decides it.
        let behind = stamp(Decision::Approve, "gate", "r2", -3_599_900);
        let a = ann(&[
            (APPROVE_ANNOTATION, "gate"),
            (APPROVED_BY, &behind.sign(&key, "team", "f")),
        ]);
        assert_eq!(verdict(Some(&key), &a, w), Verdict::Decided(behind));
        // No stamp when it began waiting: any valid one decides it.
        assert!(matches!(verdict(Some(&key), &a, W), Verdict::Decided(_)));
    }

    #[test]
    fn no_decision_naming_the_step_is_undecided() {
        let key = Key::random();
        let s = stamp(Decision::Approve, "gate", "r2", 100).sign(&key, "team", "f");
        // Withdrawn: the stamp stays, the annotation is gone.
        let a = ann(&[(APPROVED_BY, &s)]);
        assert_eq!(verdict(Some(&key), &a, W), Verdict::Undecided);
        let a = ann(&[(APPROVE_ANNOTATION, "other")]);
        assert_eq!(verdict(Some(&key), &a, W), Verdict::Undecided);
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(Key::new("short").is_none());
        assert!(Key::new("x".repeat(32)).is_some());
    }
}
