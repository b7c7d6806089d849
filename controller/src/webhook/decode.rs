//! What decoding an AdmissionReview may cost, checked before it is decoded. A review's body is
//! bounded in bytes ([`crate::http::bounds`]), but a JSON tree costs far more than its text: one
//! 3 MiB review of 370 k one-key objects (`{"a":0},` each) is ~250 MiB as a `serde_json::Value`,
//! and anyone who may create a flow could send a few at once through the API server and get the
//! controller OOM-killed (with `failurePolicy: Fail`, no flow can then change anywhere).
//!
//! So the body is first scanned by a serde visitor that builds nothing: it counts the nesting
//! depth and estimates what each value would cost once decoded (a slot per value, the bytes of
//! each string and key, a B-tree node per started eleven entries of an object), and records the
//! first value past [`Limits`] (it reads on, counting nothing, to find the request's `uid`). Only
//! a review within them is decoded. A refused review is
//! answered with a denial naming the limit it passed (the API server shows it to the user), with
//! the request's `uid` read during the scan, so the API server takes it as an answer, not as a
//! failed call.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::fmt;

use kube::core::admission::AdmissionResponse;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Deepest nesting of a review: a valid flow's spec is at most
/// [`crate::limits::MAX_SPEC_DEPTH`] deep, and sits four levels down (review, request, object,
/// spec; its managed fields mirror it a few levels further down). Below serde_json's own
/// recursion limit (128), so a deeper review gets this refusal rather than a decode error.
pub const MAX_DEPTH: usize = 100;

/// Largest estimated decoded size of one review: a valid flow of the API server's largest
/// object (1.5 MiB, etcd's limit), twice on an update, decodes well within it (its text is
/// mostly strings: a manifest, a script), while a body of tiny values is refused.
pub const MAX_DECODED_BYTES: usize = 24 << 20;

/// What one value costs in its parent (a `serde_json::Value` is 32 bytes; lists grow by
/// doubling, so a slot may be half empty).
const SLOT: usize = 48;
/// What an allocation costs besides its bytes (the allocator's header and rounding).
const ALLOCATION: usize = 16;
/// One node of an object's B-tree: eleven keys (24 bytes) and values (32), links and lengths.
const MAP_NODE: usize = 11 * (24 + 32) + 48;
/// Entries in one B-tree node.
const NODE_ENTRIES: usize = 11;

/// The bounds a review is scanned against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting (a top-level object is at depth 1).
    pub depth: usize,
    /// Largest estimated decoded size, in bytes.
    pub decoded_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            depth: MAX_DEPTH,
            decoded_bytes: MAX_DECODED_BYTES,
        }
    }
}

/// What the scan found in a review within the limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    /// Estimated decoded size, in bytes.
    pub decoded_bytes: usize,
    /// The request's `uid` ("" if it has none).
    pub uid: String,
}

/// Why a review is not decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverBudget {
    /// Nested deeper than [`Limits::depth`].
    #[error(
        "the admission review is over the webhook's decode budget: {at} is nested more than \
         {limit} levels deep (a flow's values are at most 64)"
    )]
    TooDeep {
        /// The limit.
        limit: usize,
        /// The path of the first value past it (`request.object.spec...`).
        at: String,
    },
    /// Would decode to more than [`Limits::decoded_bytes`].
    #[error(
        "the admission review is over the webhook's decode budget: its {len} bytes would take \
         more than {} MiB to decode, passed at {at} (too many small values or objects; a flow's \
         lists hold at most 1000 items)",
        limit >> 20
    )]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
        /// The path of the value that passed it (`request.object.spec.steps[0].forEach[5000]`).
        at: String,
        /// The body's length.
        len: usize,
    },
    /// Not JSON.
    #[error("the admission review is not valid JSON: {0}")]
    Syntax(String),
}

/// A refused review and the request's uid, if the scan read it before stopping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The request's `uid` ("" when not read).
    pub uid: String,
    /// Why.
    pub why: OverBudget,
}

impl Refusal {
    /// The answer to the API server: the request denied, naming why.
    pub fn response(&self) -> AdmissionResponse {
        let mut response = AdmissionResponse::invalid(&self.why);
        response.uid = self.uid.clone();
        response
    }
}

/// Scans `body` against `limits` without building it.
pub fn scan(body: &[u8], limits: Limits) -> Result<Scanned, Refusal> {
    let scanner = Scanner {
        limits,
        len: body.len(),
        used: Cell::new(0),
        refused: RefCell::new(None),
        uid: RefCell::new(None),
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let result = Seed {
        scanner: &scanner,
        depth: 1,
        role: Role::Review,
        crumb: None,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    let uid = scanner.uid.borrow().clone().unwrap_or_default();
    if let Some(why) = scanner.refused.into_inner() {
        return Err(Refusal { uid, why });
    }
    match result {
        Ok(()) => Ok(Scanned {
            decoded_bytes: scanner.used.get(),
            uid,
        }),
        Err(e) => Err(Refusal {
            uid,
            why: OverBudget::Syntax(e.to_string()),
        }),
    }
}

struct Scanner {
    limits: Limits,
    len: usize,
    used: Cell<usize>,
    refused: RefCell<Option<OverBudget>>,
    uid: RefCell<Option<String>>,
}

impl Scanner {
    /// Counts `bytes` more; whether that passed the budget just now. Once refused, nothing is
    /// counted (the scan reads on, allocating nothing, so that the request's `uid` is read
    /// wherever it stands in the body).
    fn spend(&self, bytes: usize) -> bool {
        if self.refused.borrow().is_some() {
            return false;
        }
        let used = self.used.get().saturating_add(bytes);
        self.used.set(used);
        used > self.limits.decoded_bytes
    }

    /// Records why, for [`scan`] to report (the first reason only).
    fn refuse(&self, why: OverBudget) {
        self.refused.borrow_mut().get_or_insert(why);
    }
}

/// Which value is being scanned: the review, its `request`, or anything else.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Review,
    Request,
    Uid,
    Other,
}

struct Seed<'s> {
    scanner: &'s Scanner,
    depth: usize,
    role: Role,
    /// Where this value is (None: the review itself).
    crumb: Option<&'s Crumb<'s>>,
}

/// One step of a value's path, linked to its parent's.
struct Crumb<'a> {
    parent: Option<&'a Crumb<'a>>,
    seg: Seg<'a>,
}

enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// The path of `crumb` from the review: `request.object.spec.steps[0]`.
fn path(crumb: Option<&Crumb>) -> String {
    let mut segs = Vec::new();
    let mut at = crumb;
    while let Some(c) = at {
        segs.push(&c.seg);
        at = c.parent;
    }
    let mut out = String::new();
    for seg in segs.into_iter().rev() {
        match seg {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    if out.is_empty() {
        out.push_str("the review");
    }
    out
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'s> Seed<'s> {
    fn child<'c>(&'c self, role: Role, crumb: &'c Crumb<'c>) -> Seed<'c> {
        Seed {
            scanner: self.scanner,
            depth: self.depth + 1,
            role,
            crumb: Some(crumb),
        }
    }

    /// Counts `bytes` for this value, recording the refusal, with its path, if they pass the
    /// budget.
    fn spend<E: serde::de::Error>(&self, bytes: usize) -> Result<(), E> {
        if self.scanner.spend(bytes) {
            self.scanner.refuse(OverBudget::TooLarge {
                limit: self.scanner.limits.decoded_bytes,
                at: path(self.crumb),
                len: self.scanner.len,
            });
        }
        Ok(())
    }

    /// Whether the children of a list or object here are scanned: past the depth limit the
    /// refusal is recorded and they are skipped (serde_json stops at its own limit, 128).
    fn enter(&self) -> bool {
        if self.depth > self.scanner.limits.depth {
            self.scanner.refuse(OverBudget::TooDeep {
                limit: self.scanner.limits.depth,
                at: path(self.crumb),
            });
            return false;
        }
        true
    }

    fn string<E: serde::de::Error>(&self, s: &str) -> Result<(), E> {
        if self.role == Role::Uid {
            *self.scanner.uid.borrow_mut() = Some(s.to_string());
        }
        self.spend(SLOT + s.len() + ALLOCATION)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.spend(SLOT)
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.spend(SLOT)
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.spend(SLOT)
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.spend(SLOT)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.spend(SLOT)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.spend(SLOT)
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        self.string(s)
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> Result<(), E> {
        self.string(s)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if !self.enter() {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        self.spend::<A::Error>(SLOT + ALLOCATION)?;
        for i in 0.. {
            let crumb = Crumb {
                parent: self.crumb,
                seg: Seg::Index(i),
            };
            if seq
                .next_element_seed(self.child(Role::Other, &crumb))?
                .is_none()
            {
                break;
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if !self.enter() {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        self.spend::<A::Error>(SLOT)?;
        let mut entries = 0usize;
        while let Some(MapKey(key)) = map.next_key::<MapKey>()? {
            let role = match (self.role, key.as_ref()) {
                (Role::Review, "request") => Role::Request,
                (Role::Request, "uid") => Role::Uid,
                _ => Role::Other,
            };
            let crumb = Crumb {
                parent: self.crumb,
                seg: Seg::Key(&key),
            };
            let child = self.child(role, &crumb);
            if entries.is_multiple_of(NODE_ENTRIES) {
                child.spend::<A::Error>(MAP_NODE + ALLOCATION)?;
            }
            entries += 1;
            child.spend::<A::Error>(key.len() + ALLOCATION)?;
            map.next_value_seed(child)?;
        }
        Ok(())
    }
}

/// An object key, borrowed from the body when it has no escapes.
struct MapKey<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for MapKey<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MapKey<'de>, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = MapKey<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                s: &'de str,
            ) -> Result<MapKey<'de>, E> {
                Ok(MapKey(Cow::Borrowed(s)))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<MapKey<'de>, E> {
                Ok(MapKey(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A review creating a flow whose one loop's `forEach` is `items` (raw JSON text).
    fn review(uid: &str, items: &str) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"{uid}","name":"f","namespace":"t","operation":"CREATE","kind":{{"group":"ops.example.com","version":"v1alpha1","kind":"PseudoFlow"}},"resource":{{"group":"ops.example.com","version":"v1alpha1","resource":"pseudoflows"}},"userInfo":{{"username":"u"}},"object":{{"apiVersion":"ops.example.com/v1alpha1","kind":"PseudoFlow","metadata":{{"name":"f","namespace":"t"}},"spec":{{"steps":[{{"type":"loop","forEach":[{items}],"steps":[{{"type":"log","message":"x"}}]}}]}}}}}}}}"#
        )
        .into_bytes()
    }

    fn repeated(item: &str, bytes: usize) -> String {
        vec![item; bytes / (item.len() + 1)].join(",")
    }

    #[test]
    fn a_review_of_a_valid_flow_is_within_the_limits_and_its_uid_read() {
        let body = review("u-1", r#"1,"two",{"three":3},[4]"#);
        let scanned = scan(&body, Limits::default()).unwrap();
        assert_eq!(scanned.uid, "u-1");
        // Within a small multiple of its text, and counted.
        assert!(scanned.decoded_bytes > body.len(), "{scanned:?}");
        assert!(scanned.decoded_bytes < 40 * body.len(), "{scanned:?}");
        // The same review decodes.
        let _: kube::core::admission::AdmissionReview<kube::core::DynamicObject> =
            serde_json::from_slice(&body).unwrap();
    }

    #[test]
    fn three_mib_of_tiny_values_objects_or_lists_is_refused_naming_the_budget_and_keeping_the_uid()
    {
        for item in ["0", r#"{"a":0}"#, "[0]"] {
            let body = review("u-2", &repeated(item, 3 << 20));
            let refusal = scan(&body, Limits::default()).unwrap_err();
            assert_eq!(refusal.uid, "u-2", "{item}");
            assert!(
                matches!(&refusal.why, OverBudget::TooLarge { limit, len, at }
                    if *limit == MAX_DECODED_BYTES && *len == body.len()
                        && at.starts_with("request.object.spec.steps[0].forEach[")),
                "{item}: {:?}",
                refusal.why
            );
            let response = refusal.response();
            assert!(!response.allowed);
            assert_eq!(response.uid, "u-2");
            assert!(
                response.result.message.contains("decode budget"),
                "{}",
                response.result.message
            );
        }
    }

    #[test]
    fn the_uid_is_read_after_the_value_past_the_budget() {
        let items = repeated("0", 3 << 20);
        let body = format!(
            r#"{{"request":{{"object":{{"spec":{{"forEach":[{items}]}}}},"uid":"late"}}}}"#
        );
        let refusal = scan(body.as_bytes(), Limits::default()).unwrap_err();
        assert!(
            matches!(refusal.why, OverBudget::TooLarge { .. }),
            "{refusal:?}"
        );
        assert_eq!(refusal.uid, "late");
        let nested = format!("{}0{}", "[".repeat(110), "]".repeat(110));
        let body = format!(r#"{{"request":{{"object":{nested},"uid":"late"}}}}"#);
        let refusal = scan(body.as_bytes(), Limits::default()).unwrap_err();
        assert!(
            matches!(&refusal.why, OverBudget::TooDeep { limit: MAX_DEPTH, at }
                if at.starts_with("request.object[0]")),
            "{refusal:?}"
        );
        assert_eq!(refusal.uid, "late");
    }

    #[test]
    fn three_mib_of_one_string_is_within_the_limits() {
        let text = "x".repeat(3 << 20);
        let body = review("u", &serde_json::to_string(&json!(text)).unwrap());
        let scanned = scan(&body, Limits::default()).unwrap();
        assert!(
            scanned.decoded_bytes < (3 << 20) + (16 << 10),
            "{scanned:?}"
        );
    }

    #[test]
    fn nesting_past_the_depth_limit_is_refused_before_serde_jsons_own_limit() {
        let nested = |depth: usize| format!("{}0{}", "[".repeat(depth), "]".repeat(depth));
        // The list holding the items is at depth 8 (review, request, object, spec, steps, the
        // step, forEach): items nested up to the limit pass, one more level is refused.
        let ok = review("u-3", &nested(MAX_DEPTH - 7));
        assert!(scan(&ok, Limits::default()).is_ok());
        for depth in [MAX_DEPTH - 6, 200, 100_000] {
            let refusal = scan(&review("u-3", &nested(depth)), Limits::default()).unwrap_err();
            let at = format!(
                "request.object.spec.steps[0].forEach[0]{}",
                "[0]".repeat(MAX_DEPTH - 7)
            );
            assert_eq!(
                refusal.why,
                OverBudget::TooDeep {
                    limit: MAX_DEPTH,
                    at
                },
                "{depth}"
            );
            assert_eq!(refusal.uid, "u-3");
        }
    }

    #[test]
    fn a_body_that_is_not_json_is_refused_as_such() {
        for body in [&b"{\"request\":{\"uid\":\"u\""[..], b"[1,]", b"{} {}"] {
            let refusal = scan(body, Limits::default()).unwrap_err();
            assert!(matches!(refusal.why, OverBudget::Syntax(_)), "{refusal:?}");
        }
    }
}
