//! The served mark of a bound flow recorded in its objects (`bind.record: Object`): an
//! annotation on each object saying what the flow last served of it, so that the next serve
//! computes `trigger` exactly as [`super::child::trigger`] does from a child's recorded view,
//! without keeping the view anywhere (docs/decisions.md#bound-flows-recorded-in-the-object).
//!
//! The mark is compact JSON: the bound flow's uid and generation, the object's uid and
//! generation, a short digest per two-level field path (the granularity `trigger.changed`
//! names), one per `watchFields` path, and the resourceVersion of each related object
//! (`bind.related`) it was served with, under a short digest of its key: versions only, never a
//! related object's content (a Secret's data), so at most [`MAX_RELATED`] short entries; and
//! the controller's seal over all of it ([`seal`]). Pure. A tenant who writes the mark of their
//! own object can only make that object be served again: a mark whose seal does not verify is
//! not believed, and one naming another object's uid counts as none.

pub mod seal;

use std::collections::BTreeMap;

use pseudoflow_crd::bind::Bind;
#[cfg(doc)]
use pseudoflow_crd::bind::MAX_RELATED;
use pseudoflow_crd::jsonpath::JsonPath;
use pseudoflow_crd::protocol::names::sha256_hex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::related::{self, RelatedSeen};
pub use pseudoflow_crd::protocol::served::{mark_key, progress_key, SERVED_PREFIX};
pub use seal::{Read, Sealer};
/// Largest mark written with its digests; a larger one is written without, and the next serve
/// counts every top-level field as changed.
pub const MAX_MARK_BYTES: usize = 8 * 1024;
/// Hex characters kept of each field's SHA-256 (64 bits).
const DIGEST_CHARS: usize = 16;

/// One field's digest: a string for a top-level field that is not an object, else one per key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Field {
    Value(String),
    Object(BTreeMap<String, String>),
}

/// What a bound flow last served of one object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// The bound flow's uid.
    #[serde(rename = "f")]
    pub flow_uid: String,
    /// The bound flow's generation.
    #[serde(rename = "g")]
    pub flow_generation: i64,
    /// The object's uid.
    #[serde(rename = "u")]
    pub object_uid: String,
    /// The object's generation.
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Digests of the top-level fields (metadata aside); None: too large, not kept.
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    fields: Option<BTreeMap<String, Field>>,
    /// Digests of the `watchFields` values, by path.
    #[serde(rename = "w", default, skip_serializing_if = "BTreeMap::is_empty")]
    watched: BTreeMap<String, String>,
    /// The related objects' resourceVersions ("" for one absent) it was served with, by a
    /// digest of each one's key (`Secret/name`): as a child's `spec.bound.related`, never
    /// their content. Set by [`Mark::with_related`]; kept when the field digests are cut.
    #[serde(rename = "l", default, skip_serializing_if = "BTreeMap::is_empty")]
    related: BTreeMap<String, String>,
    /// Whether the run failed (the bound flow's summary counts it after a restart).
    #[serde(rename = "x", default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Failed runs in a row since the object last changed (the retry's backoff grows with it).
    #[serde(rename = "n", default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// When the last of them ended (Unix seconds): the next attempt is due a backoff after.
    #[serde(rename = "t", default, skip_serializing_if = "is_zero_i64")]
    pub failed_at: i64,
    /// The failure cannot be mended by trying again (the step cannot be rendered from the
    /// object): no retry until the object changes.
    #[serde(rename = "p", default, skip_serializing_if = "std::ops::Not::not")]
    pub permanent: bool,
    /// What started the failed run (`${trigger}`), which its retries are run with.
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    pub retry_trigger: Option<Value>,
    /// The hash of the flow's revision that served it ([`super::revision`]).
    #[serde(rename = "v", default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// When that run ended (Unix seconds): a rollout's `minReadySeconds` counts from it, also
    /// after a restart ([`super::rollout`]).
    #[serde(rename = "s", default, skip_serializing_if = "is_zero_i64")]
    pub served_at: i64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

fn digest(v: &Value) -> String {
    let mut d = sha256_hex(&[&v.to_string()]);
    d.truncate(DIGEST_CHARS);
    d
}

fn is_meta(k: &str) -> bool {
    matches!(k, "metadata" | "apiVersion" | "kind")
}

impl Mark {
    /// The mark for having served `view` (the object as its triggers see it,
    /// [`super::object::view`]). Its `status`, if any, is never digested: the mark must not
    /// change with each status write-back.
    pub fn of(flow_uid: &str, flow_generation: i64, view: &Value, bind: &Bind) -> Mark {
        let view = super::object::without_status(view);
        let view = view.as_ref();
        let mut fields = BTreeMap::new();
        for (k, v) in view.as_object().into_iter().flatten() {
            if is_meta(k) {
                continue;
            }
            let f = match v.as_object() {
                Some(o) => Field::Object(o.iter().map(|(i, v)| (i.clone(), digest(v))).collect()),
                None => Field::Value(digest(v)),
            };
            fields.insert(k.clone(), f);
        }
        let watched = bind
            .watch_fields
            .iter()
            .filter_map(|p| {
                let found = JsonPath::parse(p).ok()?.eval(view);
                Some((p.clone(), digest(&json!(found))))
            })
            .collect();
        Mark {
            flow_uid: flow_uid.to_string(),
            flow_generation,
            generation: view["metadata"]["generation"].as_i64(),
            fields: Some(fields),
            watched,
            ..Mark::empty(view["metadata"]["uid"].as_str().unwrap_or_default())
        }
    }

    /// The mark of object `object_uid` that records nothing: no flow, no digest, no related
    /// object, no failure, no revision. [`Mark::of`] and [`Mark::unverified`] start from it, so
    /// that a field added to the mark starts empty in both.
    fn empty(object_uid: &str) -> Mark {
        Mark {
            flow_uid: String::new(),
            flow_generation: 0,
            object_uid: object_uid.into(),
            generation: None,
            fields: None,
            watched: BTreeMap::new(),
            related: BTreeMap::new(),
            failed: false,
            failures: 0,
            failed_at: 0,
            permanent: false,
            retry_trigger: None,
            revision: None,
            served_at: 0,
        }
    }

    /// The mark recording the related objects as `seen` (key, what it is now): each one's
    /// resourceVersion under [`related_key`], nothing of its content.
    pub fn with_related(mut self, seen: &[(String, RelatedSeen)]) -> Mark {
        self.related = seen
            .iter()
            .map(|(key, s)| (related_key(key), s.version.clone()))
            .collect();
        self
    }

    /// A mark recording nothing of what was served, for an object whose mark names it but is
    /// not believed ([`seal`]): every top-level field counts as changed, and so does the flow
    /// (no flow has generation 0), so the object runs again as an update, with no failure
    /// counted, no retry schedule and no revision of its own.
    pub fn unverified(object_uid: &str) -> Mark {
        Mark::empty(object_uid)
    }

    /// The annotation's value, unsealed ([`Sealer::seal`] writes it): compact JSON, without
    /// the field digests past [`MAX_MARK_BYTES`] (less room for a seal).
    pub fn encode(&self) -> String {
        serde_json::to_string(&self.bounded()).expect("a mark serialises")
    }

    /// The mark as written: without its field digests when it would not leave room for a
    /// seal within [`MAX_MARK_BYTES`], and then also without the retry trigger's paths.
    fn bounded(&self) -> Mark {
        let fits = |m: &Mark| {
            let text = serde_json::to_string(m).expect("a mark serialises");
            text.len() + seal::SEAL_BYTES <= MAX_MARK_BYTES
        };
        if fits(self) {
            return self.clone();
        }
        let mut cut = Mark {
            fields: None,
            ..self.clone()
        };
        if fits(&cut) {
            return cut;
        }
        // The retry's trigger names too many paths: its retries are told of none.
        if let Some(t) = cut.retry_trigger.as_mut() {
            t["changed"] = json!([]);
        }
        cut
    }

    /// The mark in annotation `raw`, if it is one for object `object_uid`, seal unchecked
    /// ([`Sealer::read`] checks it; anything else, unreadable or copied from another object,
    /// counts as no mark).
    fn decode(raw: &str, object_uid: &str) -> Option<Mark> {
        let m: Mark = serde_json::from_str(raw).ok()?;
        (m.object_uid == object_uid).then_some(m)
    }
}

/// What starts a serve of `view` given the object's last mark: as [`super::child::trigger`]
/// for the view the mark was made from, and an update naming nothing when only the bound flow
/// changed since (its new spec runs for every object, as every child is re-made).
pub fn trigger(mark: Option<&Mark>, flow: (&str, i64), view: &Value, bind: &Bind) -> Option<Value> {
    let Some(prev) = mark else {
        return Some(json!({"event": "create", "changed": []}));
    };
    let now = Mark::of(flow.0, flow.1, view, bind);
    let content_counts = match (prev.generation, now.generation) {
        (Some(a), Some(b)) => a != b,
        _ => true,
    };
    let mut changed: std::collections::BTreeSet<String> = Default::default();
    if content_counts {
        changed.extend(content_changes(prev, &now));
    }
    for path in &bind.watch_fields {
        if prev.watched.get(path) != now.watched.get(path) {
            changed.insert(path.clone());
        }
    }
    let generation_moved = prev.generation != now.generation;
    let flow_moved = (prev.flow_uid.as_str(), prev.flow_generation) != flow;
    if changed.is_empty() && !generation_moved && !flow_moved {
        return None;
    }
    Some(json!({"event": "update", "changed": changed}))
}

/// How a mark names related object `key` (`Secret/name`): a short digest, so that the mark
/// stays small whatever the names.
fn related_key(key: &str) -> String {
    let mut d = sha256_hex(&["related", key]);
    d.truncate(DIGEST_CHARS);
    d
}

/// The related objects (their keys, as `${trigger.changed}` names them) whose content changed
/// since `mark` was written, given what each is now (`seen`) and what this process remembers of
/// each when it was last looked at (`remembered`; none after a restart): [`related::changed`]
/// against the versions the mark records. A new version of the same content (a label, an
/// annotation, a status write) is no change; of unknown content (after a restart) it is one.
pub fn related_changes(
    mark: &Mark,
    seen: &[(String, RelatedSeen)],
    remembered: impl Fn(&str) -> Option<RelatedSeen>,
) -> Vec<String> {
    let recorded: BTreeMap<String, String> = seen
        .iter()
        .filter_map(|(key, _)| {
            let v = mark.related.get(&related_key(key))?;
            Some((key.clone(), v.clone()))
        })
        .collect();
    seen.iter()
        .filter(|(key, now)| related::changed(&recorded, key, now, remembered(key).as_ref()))
        .map(|(key, _)| key.clone())
        .collect()
}

/// The two-level paths whose digests differ; every top-level field when `prev` kept none.
fn content_changes(prev: &Mark, now: &Mark) -> Vec<String> {
    let now_fields = now.fields.as_ref().expect("made with digests");
    let Some(prev_fields) = &prev.fields else {
        return now_fields.keys().map(|k| format!(".{k}")).collect();
    };
    let keys: std::collections::BTreeSet<&String> =
        prev_fields.keys().chain(now_fields.keys()).collect();
    let mut out = Vec::new();
    for k in keys {
        match (prev_fields.get(k), now_fields.get(k)) {
            (a, b) if a == b => {}
            (Some(Field::Object(x)), Some(Field::Object(y))) => {
                let inner: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                out.extend(
                    inner
                        .into_iter()
                        .filter(|i| x.get(*i) != y.get(*i))
                        .map(|i| format!(".{k}.{i}")),
                );
            }
            _ => out.push(format!(".{k}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bind::child;

    fn bind(watch: &[&str]) -> Bind {
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Gadget",
            "watchFields": watch}))
        .unwrap()
    }

    fn obj(uid: &str, generation: i64, spec: Value, extra: Value) -> Value {
        let mut v = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
            "metadata": {"name": "g", "uid": uid, "generation": generation,
                "annotations": {"pw": "a"}},
            "spec": spec});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    }

    /// The trigger from the mark of `a`, and the one a child computes from `a` itself.
    fn both(a: &Value, b: &Value, bind: &Bind) -> (Option<Value>, Option<Value>) {
        let m = Mark::decode(&Mark::of("f", 1, a, bind).encode(), "u1");
        let ours = trigger(m.as_ref(), ("f", 1), b, bind);
        (ours, child::trigger(Some(a), b, bind))
    }

    #[test]
    fn the_trigger_from_a_mark_is_the_childs_trigger() {
        let b0 = bind(&[]);
        let a = obj(
            "u1",
            1,
            json!({"size": 1, "name": "x"}),
            json!({"replicas": 2}),
        );
        let cases = [
            obj(
                "u1",
                2,
                json!({"size": 2, "name": "x"}),
                json!({"replicas": 2}),
            ),
            obj(
                "u1",
                2,
                json!({"size": 1, "name": "x"}),
                json!({"replicas": 3}),
            ),
            obj(
                "u1",
                2,
                json!({"size": 1}),
                json!({"replicas": 2, "data": {"k": 1}}),
            ),
            obj("u1", 2, json!("flat"), json!({})),
            obj(
                "u1",
                1,
                json!({"size": 9, "name": "x"}),
                json!({"replicas": 2}),
            ),
            a.clone(),
        ];
        for b in &cases {
            let (ours, childs) = both(&a, b, &b0);
            assert_eq!(ours, childs, "{b}");
        }
        let mut pw = a.clone();
        pw["metadata"]["annotations"]["pw"] = json!("b");
        let w = bind(&[".metadata.annotations.pw"]);
        assert_eq!(both(&a, &pw, &w).0, both(&a, &pw, &w).1);
        assert_eq!(
            both(&a, &pw, &w).0.unwrap()["changed"],
            json!([".metadata.annotations.pw"])
        );
        assert_eq!(trigger(None, ("f", 1), &a, &b0).unwrap()["event"], "create");
    }

    #[test]
    fn kinds_without_generation_count_any_change_and_a_flow_change_reruns_all() {
        let b0 = bind(&[]);
        let a = json!({"metadata": {"name": "s", "uid": "u1"}, "data": {"k": "1"}});
        let b = json!({"metadata": {"name": "s", "uid": "u1"}, "data": {"k": "2"}});
        assert_eq!(both(&a, &b, &b0).0, both(&a, &b, &b0).1);
        assert_eq!(both(&a, &a, &b0).0, None);
        let m = Mark::of("f", 1, &a, &b0);
        let t = trigger(Some(&m), ("f", 2), &a, &b0).unwrap();
        assert_eq!(t, json!({"event": "update", "changed": []}));
    }

    #[test]
    fn a_status_is_never_digested_so_its_write_back_starts_nothing() {
        let b0 = bind(&[".status.copiedTo"]);
        let a = obj(
            "u1",
            1,
            json!({"size": 1}),
            json!({"status": {"copiedTo": ["x"]}}),
        );
        let b = obj(
            "u1",
            1,
            json!({"size": 1}),
            json!({"status": {"copiedTo": ["y"]}}),
        );
        let plain = obj("u1", 1, json!({"size": 1}), json!({}));
        assert_eq!(
            Mark::of("f", 1, &a, &b0).encode(),
            Mark::of("f", 1, &plain, &b0).encode()
        );
        let m = Mark::of("f", 1, &a, &b0);
        assert_eq!(trigger(Some(&m), ("f", 1), &b, &b0), None);
    }

    #[test]
    fn a_mark_over_the_cap_keeps_no_digests_and_then_everything_changed() {
        let b0 = bind(&[]);
        let many: serde_json::Map<String, Value> =
            (0..1000).map(|i| (format!("k{i}"), json!(i))).collect();
        let a = obj("u1", 1, Value::Object(many), json!({"replicas": 2}));
        let raw = Mark::of("f", 1, &a, &b0).encode();
        assert!(raw.len() <= MAX_MARK_BYTES, "{}", raw.len());
        let m = Mark::decode(&raw, "u1").unwrap();
        assert_eq!(
            trigger(Some(&m), ("f", 1), &a, &b0),
            None,
            "same generation"
        );
        let mut b = a.clone();
        b["metadata"]["generation"] = json!(2);
        let t = trigger(Some(&m), ("f", 1), &b, &b0).unwrap();
        assert_eq!(t["changed"], json!([".replicas", ".spec"]));
    }

    #[test]
    fn a_mark_forged_or_copied_from_another_object_counts_as_none() {
        let b0 = bind(&[]);
        let a = obj("uA", 1, json!({"size": 1}), json!({}));
        let raw = Mark::of("f", 1, &a, &b0).encode();
        assert!(Mark::decode(&raw, "uA").is_some());
        assert_eq!(Mark::decode(&raw, "uB"), None, "another object's mark");
        assert_eq!(Mark::decode("{not json", "uA"), None);
        assert_eq!(Mark::decode(&"[".repeat(10_000), "uA"), None, "deep");
        let key = mark_key("ops", "gadgets");
        assert!(key.starts_with(SERVED_PREFIX) && key.len() <= SERVED_PREFIX.len() + 63);
        assert_ne!(key, mark_key("other", "gadgets"));
    }

    fn seen(version: &str, digest: u64) -> RelatedSeen {
        RelatedSeen {
            version: version.into(),
            digest,
        }
    }

    #[test]
    fn the_mark_records_related_versions_compactly_and_never_their_content() {
        let b0 = bind(&[]);
        let a = obj("u1", 1, json!({"secret": "s"}), json!({}));
        // The longest keys there can be, as many as a flow may name (MAX_RELATED).
        let long = "x".repeat(253);
        let related: Vec<(String, RelatedSeen)> = (0..pseudoflow_crd::bind::MAX_RELATED)
            .map(|i| (format!("Secret/ns{i}/{long}"), seen("123456789", 42)))
            .collect();
        let plain = Mark::of("f", 1, &a, &b0).encode();
        let raw = Mark::of("f", 1, &a, &b0).with_related(&related).encode();
        assert!(!raw.contains(&long), "keys are digests: {raw}");
        // Each entry: a 16-character digest and the version, quoted.
        assert!(
            raw.len() - plain.len() <= 8 * 40,
            "{}",
            raw.len() - plain.len()
        );
        let m = Mark::decode(&raw, "u1").unwrap();
        assert_eq!(
            related_changes(&m, &related, |_| None),
            Vec::<String>::new()
        );
        // A mark cut for its size keeps the related versions (else every serve would see
        // each related object as new and run again).
        let many: serde_json::Map<String, Value> =
            (0..1000).map(|i| (format!("k{i}"), json!(i))).collect();
        let big = obj("u1", 1, Value::Object(many), json!({}));
        let raw = Mark::of("f", 1, &big, &b0).with_related(&related).encode();
        assert!(raw.len() <= MAX_MARK_BYTES, "{}", raw.len());
        let m = Mark::decode(&raw, "u1").unwrap();
        assert!(m.fields.is_none(), "cut");
        assert_eq!(
            related_changes(&m, &related, |_| None),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_related_object_changed_when_its_content_did_or_is_unknown_not_its_metadata() {
        let b0 = bind(&[]);
        let a = obj("u1", 1, json!({"secret": "s"}), json!({}));
        let was = [("Secret/s".to_string(), seen("7", 11))];
        let m = Mark::of("f", 1, &a, &b0).with_related(&was);
        let m = Mark::decode(&m.encode(), "u1").unwrap();
        let remembered = |_: &str| Some(seen("7", 11));
        let now = |v: &str, d| [("Secret/s".to_string(), seen(v, d))];
        assert!(related_changes(&m, &now("7", 11), remembered).is_empty());
        // A label or a status write: a new version, the same content.
        assert!(related_changes(&m, &now("8", 11), remembered).is_empty());
        assert_eq!(related_changes(&m, &now("8", 12), remembered), ["Secret/s"]);
        // After a restart nothing is remembered: a new version counts (one extra run at most),
        // the version the mark records does not.
        assert_eq!(related_changes(&m, &now("8", 11), |_| None), ["Secret/s"]);
        assert!(related_changes(&m, &now("7", 11), |_| None).is_empty());
        // Gone since: a change; a reference the mark does not know (a mark written before it
        // recorded related objects) counts when its object is there.
        assert_eq!(related_changes(&m, &now("", 0), remembered), ["Secret/s"]);
        let old = Mark::of("f", 1, &a, &b0);
        assert_eq!(related_changes(&old, &now("7", 11), |_| None), ["Secret/s"]);
        let absent = [("Secret/gone".to_string(), seen("", 0))];
        assert!(related_changes(&old, &absent, |_| None).is_empty());
    }
}
