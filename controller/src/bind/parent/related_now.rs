//! The related objects of one bound object (`bind.related`): what each is now, read as the
//! flow's ServiceAccount, and which changed since its child was made (what starts a run).

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::Binding;
use crate::bind::access;
use crate::bind::related::{self, RelatedSeen};
use crate::flow::Error;

impl Binding<'_> {
    /// `trigger` with the related objects of `child` that changed since it was made.
    pub(super) fn with_related(
        &self,
        name: &str,
        child: &DynamicObject,
        trigger: Option<Value>,
        seen: &[(String, RelatedSeen)],
    ) -> Option<Value> {
        let recorded: BTreeMap<String, String> =
            serde_json::from_value(child.data["spec"]["bound"]["related"].clone())
                .unwrap_or_default();
        let binder = &self.r.own;
        let changed: Vec<String> = seen
            .iter()
            .filter(|(key, now)| {
                let remembered = binder.remembered(&self.memo_key(name, key));
                related::changed(&recorded, key, now, remembered.as_ref())
            })
            .map(|(key, _)| key.clone())
            .collect();
        related::with_changes(trigger, changed)
    }

    /// What each related object of `view` is now (`bind.related`), read as the flow's
    /// ServiceAccount; `Err` says why the object cannot be served (a reference that renders to
    /// no name, a related object the ServiceAccount may not read).
    pub(super) async fn related_now(
        &self,
        view: &Value,
    ) -> Result<Result<Vec<(String, RelatedSeen)>, String>, Error> {
        if self.bind.related.is_empty() {
            return Ok(Ok(vec![]));
        }
        let resolved = match related::resolve(&self.r.ctx.engine, &self.bind.related, view) {
            Ok(r) => r,
            Err(why) => return Ok(Err(why)),
        };
        let client = self.objects.clone().into_client();
        let mut out = Vec::new();
        for res in resolved {
            let rel = &self.bind.related[res.index];
            let id = (rel.api_version.clone(), rel.kind.clone());
            let Some((ar, namespaced)) = self.related_kinds.get(&id) else {
                continue;
            };
            let api: Api<DynamicObject> = match (&res.namespace, namespaced) {
                (Some(ns), true) => Api::namespaced_with(client.clone(), ns, ar),
                _ => Api::all_with(client.clone(), ar),
            };
            let found = match api.get_opt(&res.name).await {
                Ok(found) => found,
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    let ns = res.namespace.as_deref().filter(|_| *namespaced);
                    let who = self.who();
                    let m = access::related_message(&who, "get", ar, ns);
                    let i = res.index;
                    return Ok(Err(format!("spec.bind.related[{i}] ({}): {m}", res.key)));
                }
                Err(e) => return Err(e.into()),
            };
            let version = found
                .as_ref()
                .and_then(|o| o.metadata.resource_version.clone())
                .unwrap_or_default();
            let digest = related::content_digest(found.as_ref());
            out.push((res.key, RelatedSeen { version, digest }));
        }
        Ok(Ok(out))
    }

    fn who(&self) -> String {
        let raw = &self.r.raw_spec["serviceAccountName"];
        format!("{}/{}", self.r.ns(), raw.as_str().unwrap_or("default"))
    }

    fn memo_key(&self, child: &str, key: &str) -> String {
        format!("{}/{child}/{key}", self.r.uid)
    }

    pub(super) fn remember(&self, child: &str, seen: &[(String, RelatedSeen)]) {
        for (key, s) in seen {
            let memo = self.memo_key(child, key);
            self.r.own.remember(memo, s.clone());
        }
    }
}
