//! Serving every object of the kind (a full pass: at the first reconcile, after the flow
//! changed, at each resync), a page at a time and several objects at once, each decoded alone.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{DynamicObject, ListParams};
use pseudoflow_crd::bind::BindRecord;
use serde_json::json;

use super::children::Children;
use super::{Binding, OBJECTS_SERVED_AT_ONCE, RESYNC, RETRY_OBJECT};
use crate::bind::summary::Refused;
use crate::bind::{decode, object, pages};
use crate::flow::Error;

impl Binding<'_> {
    /// Object `key` was listed by this reconcile's full pass.
    fn listed(&self, key: &str) {
        self.listed
            .lock()
            .expect("not poisoned")
            .insert(key.to_string());
    }

    /// Serves every object, a page at a time, each decoded alone (one that cannot be, too deep
    /// or too large, is named and skipped, and the others are served); returns how soon to look
    /// again, or why the objects cannot be listed.
    pub(super) async fn serve_all(
        &self,
        generation: i64,
    ) -> Result<Result<Duration, String>, Error> {
        let children = self.children().await?;
        let legacy = !children.old.is_empty();
        let mut refusals = BTreeMap::new();
        let mut again = RESYNC;
        let mut token: Option<String> = None;
        loop {
            let lp = ListParams::default();
            let page = match pages::raw_page(&self.objects, &lp, token.as_deref()).await {
                Ok(page) => page,
                Err(e) => return Ok(Err(format!("listing {} objects: {e}", self.bind.kind))),
            };
            // Several objects at once (in order): each is a few API calls of its own, and a
            // kind with hundreds of new objects should not wait for them one after another.
            let mut serving = Vec::with_capacity(page.items.len());
            for (i, raw) in page.items.iter().enumerate() {
                serving.push(self.serve_alone(raw.get(), i, &children));
            }
            let served: Vec<(Option<Refused>, Duration)> = futures::stream::iter(serving)
                .buffered(OBJECTS_SERVED_AT_ONCE)
                .collect()
                .await;
            for (refusal, sooner) in served {
                refusals.extend(refusal.map(|r| (r.object, r.message)));
                again = again.min(sooner);
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                break;
            }
        }
        let pending = &self.r.own.watches.pending;
        pending.full_pass_done(self.r.uid, generation, legacy, refusals);
        if self.bind.record == Some(BindRecord::Object) {
            // What was served of objects gone since (deleted while no watch told of it) goes.
            let listed = self.listed.lock().expect("not poisoned");
            self.r.own.outcomes.retain(self.r.uid, &listed);
        }
        if again < RESYNC {
            // An object to try again soon: which one is in no list kept, so all are.
            pending.everything(self.r.uid);
        }
        Ok(Ok(again))
    }

    /// [`Binding::serve_raw`], with how soon this object wants the next look.
    async fn serve_alone(
        &self,
        raw: &str,
        i: usize,
        children: &Children,
    ) -> (Option<Refused>, Duration) {
        let mut again = RESYNC;
        let refusal = self.serve_raw(raw, i, children, &mut again).await;
        (refusal, again)
    }

    /// Decodes item `i` of a page and serves it; returns why it cannot be, if so. One object's
    /// trouble (a conflict, an admission webhook refusing its finalizer) is its own: the others
    /// are served, and it is tried again soon (`again`).
    pub(super) async fn serve_raw(
        &self,
        raw: &str,
        i: usize,
        children: &Children,
        again: &mut Duration,
    ) -> Option<Refused> {
        let obj = match decode::object(raw, i) {
            Ok(obj) => obj,
            // Deleted (or no longer matching), its metadata is all letting it go reads.
            Err(u) => match u.meta.filter(|m| self.leaving(m)) {
                Some(metadata) => DynamicObject {
                    types: None,
                    metadata: *metadata,
                    data: json!({}),
                },
                None => {
                    let (object, message) = (u.object, u.message);
                    self.listed(&object);
                    return Some(Refused { object, message });
                }
            },
        };
        self.listed(&object::key(&obj));
        let message = match self.serve(&obj, children).await {
            Ok(None) => return None,
            Ok(Some(why)) => why.0,
            Err(e) => {
                *again = RETRY_OBJECT;
                format!("serving it: {e}")
            }
        };
        let object = object::key(&obj);
        Some(Refused { object, message })
    }
}
