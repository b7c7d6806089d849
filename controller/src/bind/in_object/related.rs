//! The related objects (`bind.related`) of an object recorded in itself: which changed since
//! its served mark, naming them in `${trigger.changed}` as a child's trigger does
//! (`crate::bind::parent` for children). The mark keeps each one's resourceVersion
//! ([`served::related_changes`]); whether a new version changed the content is decided with
//! the digest this process remembers of it (never written anywhere), under a key of the bound
//! flow's uid and the object's `namespace/name` (forgotten when the object goes), so that after a restart a new version counts as a change
//! (one extra run at most) and a label, an annotation or a status write never does.

use serde_json::Value;

use super::Serving;
use crate::bind::related::{self, RelatedSeen};
use crate::bind::served::{self, Mark};
use crate::bind::Binder;

impl Serving<'_> {
    /// `changed` (what the object's own change starts, from its mark) with the related objects
    /// of the object `object` (`namespace/name`) whose content changed since `mark` was written. When none did, what
    /// they are now is remembered (a new version of the same content then stays no change).
    /// Without a mark the object runs as created anyway.
    pub(super) fn with_related(
        &self,
        object: &str,
        mark: Option<&Mark>,
        changed: Option<Value>,
    ) -> Option<Value> {
        let Some(mark) = mark.filter(|_| !self.related.is_empty()) else {
            return changed;
        };
        let own = &self.r.own;
        let flow = self.parent.uid;
        let remembered = |key: &str| own.remembered(&memo_key(flow, object, key));
        let moved = served::related_changes(mark, self.related, remembered);
        if moved.is_empty() {
            self.remember_related(object, self.related);
        }
        related::with_changes(changed, moved)
    }

    /// Remembers what the related objects of object `object` are (`seen`): once its mark
    /// records their versions, or when none changed since it did.
    pub(super) fn remember_related(&self, object: &str, seen: &[(String, RelatedSeen)]) {
        for (key, s) in seen {
            let memo = memo_key(self.parent.uid, object, key);
            self.r.own.remember(memo, s.clone());
        }
    }
}

/// Forgets what is remembered of the related objects of object `object` (`namespace/name`)
/// of the bound flow `flow_uid` (the object went, or the flow let it go). An object made
/// again under the name has no mark, so it runs as created whatever is remembered.
pub(crate) fn forget(own: &Binder, flow_uid: &str, object: &str) {
    own.forget(&format!("{flow_uid}/object/{object}/"));
}

/// Where the related object `key` of object `object` (`namespace/name`) is remembered:
/// beside a child's (`<flow uid>/<child>/<key>`; a child's name has no `/`, and neither has
/// an object's name, so no two meet).
fn memo_key(flow_uid: &str, object: &str, key: &str) -> String {
    format!("{flow_uid}/object/{object}/{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_objects_memo_is_forgotten_alone_and_never_meets_a_childs() {
        let own = Binder::default();
        let seen = RelatedSeen {
            version: "7".into(),
            digest: 11,
        };
        own.remember(memo_key("f", "ns/w", "Secret/s"), seen.clone());
        own.remember(memo_key("f", "ns/w2", "Secret/s"), seen.clone());
        // A child of flow f keeps its own (`<flow uid>/<child>/<key>`).
        own.remember("f/w/Secret/s".into(), seen.clone());
        forget(&own, "f", "ns/w");
        assert_eq!(own.remembered(&memo_key("f", "ns/w", "Secret/s")), None);
        let other = own.remembered(&memo_key("f", "ns/w2", "Secret/s"));
        assert_eq!(other, Some(seen.clone()), "ns/w2 is not ns/w's");
        assert_eq!(own.remembered("f/w/Secret/s"), Some(seen));
    }
}
