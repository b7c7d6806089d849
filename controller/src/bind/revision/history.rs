//! A bound flow's ControllerRevisions: read once per change of the flow (and at least every
//! [`REREAD`]), the current one made (or, when the flow went back to an older spec, renumbered
//! newest, as a DaemonSet does), and the oldest unused ones pruned past the history limit. Kept
//! in the controller's memory between reconciles, so an unchanged flow costs no request.
//! Written with the controller's own client (the chart grants it ControllerRevisions); a
//! revision is the flow's only if it names the flow as its controller and its data hashes to
//! its hash label, so one planted under its name is never taken for it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use pseudoflow_crd::protocol::label_value;
use pseudoflow_crd::rollout::Rollout;
use serde_json::{json, Value};

use super::{counts, data, hash, hash_of_data, name, seal, REVISION_HASH_LABEL, REVISION_OF_LABEL};
use crate::bind::Binder;
use crate::flow::events::EventType;
use crate::flow::{Error, Reconciling};

/// How often the revisions are read again though the flow did not change (one deleted by hand).
const REREAD: i64 = 300;
/// How soon revisions that could not be read or made are tried again.
const RETRY: i64 = 30;

/// One of a bound flow's revisions.
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    /// The ControllerRevision's name.
    pub name: String,
    /// Its `revision` (higher is newer).
    pub number: i64,
    /// The hash of its data ([`super::hash`]).
    pub hash: String,
    /// Its uid (a deletion names it, so a revision made again meanwhile stays).
    pub uid: String,
}

/// A bound flow's revisions as last read or written.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The flow's generation they were read for, and when (Unix seconds).
    generation: i64,
    read_at: i64,
    /// The hash of the flow's revision now (None: its ControllerRevision could not be made).
    pub current: Option<String>,
    /// Every revision of the flow.
    pub all: Vec<Revision>,
    /// Each revision's `data` by hash, to serve an object with a revision not current (a
    /// rollout's, bind/rollout): as many as the history limit keeps, shared, never copied.
    pub data: BTreeMap<String, Arc<Value>>,
    /// Whether reading or making them failed, or the current one's name is taken (tried again
    /// [`RETRY`] seconds on).
    failed: bool,
}

impl History {
    /// The current revision.
    pub fn current(&self) -> Option<&Revision> {
        let h = self.current.as_deref()?;
        self.all.iter().find(|r| r.hash == h)
    }

    /// The revision before the current one (the highest-numbered below it), if any.
    pub fn previous(&self) -> Option<&Revision> {
        let c = self.current()?;
        let below = self.all.iter().filter(|r| r.number < c.number);
        below.max_by_key(|r| r.number)
    }

    /// The revision of hash `h`, if kept.
    pub fn by_hash(&self, h: &str) -> Option<&Revision> {
        self.all.iter().find(|r| r.hash == h)
    }
}

/// The histories of every bound flow, by flow uid.
#[derive(Default)]
pub struct Histories(Mutex<HashMap<String, History>>);

impl Histories {
    fn get(&self, uid: &str) -> Option<History> {
        self.0.lock().expect("not poisoned").get(uid).cloned()
    }

    fn put(&self, uid: &str, h: History) {
        self.0.lock().expect("not poisoned").insert(uid.into(), h);
    }

    /// Forgets flow `uid` (released: its revisions go with it, by their owner reference).
    pub fn forget(&self, uid: &str) {
        self.0.lock().expect("not poisoned").remove(uid);
    }
}

/// The ControllerRevisions of the flow's namespace.
fn api(r: &Reconciling<'_, Binder>) -> Api<ControllerRevision> {
    Api::namespaced(r.ctx.client.clone(), r.ns())
}

/// The bound flow's revisions, its current one made: from memory while the flow is unchanged.
/// Revisions that cannot be read or made (the controller lacks the right) stop no object from
/// being served: a `RevisionFailed` Warning says why, the status names no revision, and they
/// are tried again [`RETRY`] seconds on.
pub(crate) async fn current(r: &Reconciling<'_, Binder>) -> History {
    let kept = r.own.revisions.get(r.uid);
    if let Some(k) = kept.filter(|k| fresh(k, r)) {
        return k;
    }
    let h = hash(&r.raw_spec);
    let history = match read_and_make(r, &h).await {
        Ok(history) => history,
        Err(e) => {
            let why = format!("keeping the flow's revisions (ControllerRevisions): {e}");
            r.publish(EventType::Warning, "RevisionFailed", &why).await;
            History {
                generation: r.generation,
                read_at: r.now - REREAD + RETRY,
                failed: true,
                ..Default::default()
            }
        }
    };
    r.own.revisions.put(r.uid, history.clone());
    history
}

/// The flow's revisions read, and its current one `h` made.
async fn read_and_make(r: &Reconciling<'_, Binder>, h: &str) -> Result<History, Error> {
    let mut history = read(r, h).await?;
    history.generation = r.generation;
    history.read_at = r.now;
    let made = make_current(r, &mut history, h).await?;
    history.current = made.then(|| h.to_string());
    if !made {
        // A ControllerRevision of its name is not the flow's: told, and tried again later.
        history.failed = true;
        history.read_at = r.now - REREAD + RETRY;
    }
    Ok(history)
}

/// Whether the history kept for `r` still holds: read lately for the same generation (so the
/// same spec, whose hash need not be computed again), its current revision made or failing.
fn fresh(k: &History, r: &Reconciling<'_, Binder>) -> bool {
    let made = k.current.is_some() || k.failed;
    k.generation == r.generation && made && r.now - k.read_at < REREAD
}

/// Reads the flow's revisions: those labelled for it that name it as their controller, whose
/// data hashes to their hash label and that carry this controller's seal ([`seal`]). One
/// unsealed but otherwise the flow's whose hash is the current spec's `h` (made before
/// revisions were sealed) is sealed now: its data is the spec the flow's author wrote.
async fn read(r: &Reconciling<'_, Binder>, h: &str) -> Result<History, Error> {
    let lp = ListParams::default().labels(&format!(
        "{REVISION_OF_LABEL}={}",
        label_value(r.flow_id.name)
    ));
    let list = api(r).list(&lp).await?;
    let mut history = History::default();
    for cr in &list.items {
        let Some(rev) = ours(cr, r.uid) else {
            continue;
        };
        if trusted(r, cr, &rev, h).await? {
            let data = cr.data.as_ref().map(|d| d.0.clone()).unwrap_or_default();
            history.data.insert(rev.hash.clone(), Arc::new(data));
            history.all.push(rev);
        }
    }
    Ok(history)
}

/// Whether the flow's revision `rev` (`cr`) was made by this controller: sealed under its key
/// (with no key, as in tests without one, every revision is). An unsealed one is sealed if it
/// is the current spec's revision `h`.
async fn trusted(
    r: &Reconciling<'_, Binder>,
    cr: &ControllerRevision,
    rev: &Revision,
    h: &str,
) -> Result<bool, Error> {
    let Some(key) = r.own.approval_key.as_ref() else {
        return Ok(true);
    };
    let at = (r.ns(), r.flow_id.name);
    if seal::is_sealed(key, at, r.uid, &rev.hash, cr.metadata.annotations.as_ref()) {
        return Ok(true);
    }
    if rev.hash != h {
        return Ok(false);
    }
    let value = seal::seal(key, at, r.uid, h);
    let patch = json!({"metadata": {"annotations": {seal::SEAL_ANNOTATION: value}}});
    api(r)
        .patch(&rev.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(true)
}

/// `cr` as the flow `uid`'s revision, if it is one (owned by it, its data hashing to its
/// label; [`trusted`] checks who made it).
fn ours(cr: &ControllerRevision, uid: &str) -> Option<Revision> {
    let m = &cr.metadata;
    let owned = m.owner_references.iter().flatten();
    if !owned
        .into_iter()
        .any(|o| o.uid == uid && o.controller == Some(true))
    {
        return None;
    }
    let labelled = m.labels.as_ref()?.get(REVISION_HASH_LABEL)?;
    let data = cr.data.as_ref().map(|d| &d.0).unwrap_or(&Value::Null);
    (hash_of_data(data) == *labelled).then(|| Revision {
        name: m.name.clone().unwrap_or_default(),
        number: cr.revision,
        hash: labelled.clone(),
        uid: m.uid.clone().unwrap_or_default(),
    })
}

/// Makes revision `h` the newest of `all`: created with the next number, or, if the flow went
/// back to it, renumbered so. False when a ControllerRevision of its name is not the flow's
/// (told as a `RevisionRefused` Warning: objects are still served, their records name `h`).
async fn make_current(
    r: &Reconciling<'_, Binder>,
    history: &mut History,
    h: &str,
) -> Result<bool, Error> {
    let all = &mut history.all;
    let max = all.iter().map(|x| x.number).max().unwrap_or(0);
    if let Some(x) = all.iter_mut().find(|x| x.hash == h) {
        if x.number < max {
            let patch = json!({"revision": max + 1});
            let pp = PatchParams::default();
            api(r).patch(&x.name, &pp, &Patch::Merge(&patch)).await?;
            x.number = max + 1;
        }
        return Ok(true);
    }
    let made = made(r, h, max + 1);
    match api(r).create(&PostParams::default(), &made).await {
        Ok(cr) => {
            if let Some(rev) = ours(&cr, r.uid) {
                let data = cr.data.map(|d| d.0).unwrap_or_default();
                history.data.insert(rev.hash.clone(), Arc::new(data));
                history.all.push(rev);
            }
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let why = format!(
                "a ControllerRevision named {} already exists and is not this flow's revision; \
                 it is not used (delete it to have the revision kept)",
                name(r.flow_id.name, h)
            );
            r.publish(EventType::Warning, "RevisionRefused", &why).await;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// The ControllerRevision of the flow's revision `h`, numbered `number`.
fn made(r: &Reconciling<'_, Binder>, h: &str, number: i64) -> ControllerRevision {
    let key = r.own.approval_key.as_ref();
    let sealed = key.map(|k| seal::seal(k, (r.ns(), r.flow_id.name), r.uid, h));
    let annotations = sealed.map(|v| json!({ seal::SEAL_ANNOTATION: v }));
    serde_json::from_value(json!({
        "metadata": {
            "name": name(r.flow_id.name, h),
            "namespace": r.ns(),
            "annotations": annotations,
            "labels": {
                REVISION_OF_LABEL: label_value(r.flow_id.name),
                REVISION_HASH_LABEL: h,
            },
            "ownerReferences": [{
                "apiVersion": "ops.example.com/v1alpha1",
                "kind": "PseudoFlow",
                "name": r.flow_id.name,
                "uid": r.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "data": RawExtension(data(&r.raw_spec)),
        "revision": number,
    }))
    .expect("a ControllerRevision")
}

/// Deletes the oldest revisions past the flow's history limit that serve no object
/// (`by_hash`: objects per revision hash), and forgets them. One that cannot be deleted is
/// logged and tried again at the next summary.
pub(crate) async fn prune(
    r: &Reconciling<'_, Binder>,
    history: &mut History,
    by_hash: &BTreeMap<String, u32>,
) {
    let rollout = r.raw_spec.get("rollout").cloned().unwrap_or_default();
    let rollout: Rollout = serde_json::from_value(rollout).unwrap_or_default();
    let current = history.current.as_deref();
    let limit = rollout.history_limit();
    let gone: Vec<Revision> = counts::pruned(&history.all, current, by_hash, limit)
        .into_iter()
        .cloned()
        .collect();
    for g in &gone {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(g.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api(r).delete(&g.name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(flow = %r.key(), revision = %g.name, error = %e, "pruning a revision");
                continue;
            }
        }
        history.all.retain(|x| x.uid != g.uid);
        if !history.all.iter().any(|x| x.hash == g.hash) {
            history.data.remove(&g.hash);
        }
    }
    if !gone.is_empty() {
        r.own.revisions.put(r.uid, history.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cr(owner: &str, controller: bool, data: Value, label: &str) -> ControllerRevision {
        serde_json::from_value(json!({
            "metadata": {"name": "widgets-x", "uid": "cr-1",
                "labels": {REVISION_HASH_LABEL: label},
                "ownerReferences": [{"apiVersion": "ops.example.com/v1alpha1",
                    "kind": "PseudoFlow", "name": "widgets", "uid": owner,
                    "controller": controller}]},
            "data": data, "revision": 7}))
        .unwrap()
    }

    /// Attack: whoever may write ControllerRevisions in the flow's namespace plants one
    /// labelled for the flow, naming it as owner, with steps of their own in its data (what
    /// an undo would serve objects with): it is not the flow's unless its data hashes to its
    /// hash label and the flow is its controller.
    #[test]
    fn attack_a_revision_is_the_flows_only_if_owned_by_it_and_its_data_hashes_to_its_label() {
        let spec = json!({"steps": [{"type": "log", "message": "a"}]});
        let good = data(&spec);
        let h = hash(&spec);
        let ours_now = ours(&cr("flow-uid", true, good.clone(), &h), "flow-uid").unwrap();
        assert_eq!((ours_now.number, ours_now.hash.as_str()), (7, h.as_str()));
        assert_eq!(ours(&cr("other", true, good.clone(), &h), "flow-uid"), None);
        assert_eq!(ours(&cr("flow-uid", false, good, &h), "flow-uid"), None);
        let planted = data(&json!({"steps": [{"type": "log", "message": "evil"}]}));
        assert_eq!(ours(&cr("flow-uid", true, planted, &h), "flow-uid"), None);
    }
}
