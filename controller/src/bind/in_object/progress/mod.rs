//! An object's run progress, kept on the object while its run has a step that is not safe to
//! repeat (an `exec` in another pod, run by the controller once: `pseudoflow_compiler::record`),
//! so that a controller killed midway resumes the run where it was instead of running the
//! object again from its first step (issue #41: "a controller killed mid-run repeats no step that
//! is not safe to repeat").
//!
//! Before such a step starts, the run's state (the walker's, its variables) is written into an
//! annotation of the object, naming the step as begun; once it ended, again, without it. A
//! restarted controller serving the same change of the object reads the record and goes on from
//! it: the step it finds begun and never ended failed (it may or may not have run; it is never
//! run twice by the controller), so the run goes on as the flow says for a failed step (a
//! `retry` around it tries again, as its author allowed). The record is removed with the run's
//! served mark.
//!
//! The record is sealed and secret: ChaCha20-Poly1305 under a key derived from the controller's
//! approval key, its associated data naming the bound flow and the object's uid, so a tenant who
//! writes their object's annotations can neither read the run's variables (an `exec`'s output)
//! nor write a record the controller believes, nor move one onto another object or flow. It
//! names the run it belongs to (the change served, the served mark as the run found it, the
//! revision: [`Keeper::work`]), so a record copied from another run of the same object is not
//! believed either; a run whose end was never recorded (its mark unwritten) is resumed. Without an
//! approval key no record can be sealed, and a step not safe to repeat does not run (it fails,
//! saying why). A tenant who removes the record while the run goes on can make the controller,
//! if it restarts, run their object again from its first step: what changing the object does.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use pseudoflow_walk::{RunState, StoredRun};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::approval::Key;

/// The purpose the record's key is derived for: no stamp, mark or seal key is the same.
const PURPOSE: &str = "served-progress";
/// What starts a record's text (its format's version).
const VERSION: &str = "p1.";
/// Largest record written (an annotation's value; all of an object's together may not pass
/// 256 KiB): a run whose record would be larger does not start its step.
pub const MAX_PROGRESS_BYTES: usize = 64 * 1024;

/// Where one object's run is: what a restarted controller resumes it from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// The run it is ([`Keeper::work`]).
    #[serde(rename = "w")]
    pub work: String,
    /// The run's id (its steps' keys are made from it).
    #[serde(rename = "i")]
    pub run_id: String,
    /// When the run started (Unix seconds).
    #[serde(rename = "a")]
    pub started_at: i64,
    /// The variables its steps set so far.
    #[serde(rename = "v", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, Value>,
    /// The walker's state.
    #[serde(rename = "s")]
    pub state: RunState,
    /// The step begun and not recorded as ended: its node, loop key and attempt.
    #[serde(rename = "b", default, skip_serializing_if = "Option::is_none")]
    pub begun: Option<Begun>,
}

/// A step instance that began: node id, loop key, attempt.
pub type Begun = (String, Vec<String>, u32);

impl Progress {
    /// The record of `run` (of run `work`) as it is now, with `begun` about to start.
    pub fn of(work: &str, run: &StoredRun, begun: Option<Begun>) -> Progress {
        Progress {
            work: work.to_string(),
            run_id: run.run_id.clone(),
            started_at: run.started_at,
            vars: run.vars.clone(),
            state: run.state.clone(),
            begun,
        }
    }
}

/// Why a record could not be kept: the step that needed it does not start.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum NotKept {
    /// No approval key: nothing can be sealed.
    #[error(
        "the controller has no key to seal the object's progress record with (its Secret \
         pseudoflow-approval-key), so it runs no step that is not safe to repeat"
    )]
    NoKey,
    /// The record would be too large.
    #[error("the object's progress record would be {0} bytes, more than {MAX_PROGRESS_BYTES}")]
    TooLarge(usize),
    /// The object could not be written.
    #[error("writing the object's progress record: {0}")]
    Write(String),
}

/// How one object's records are sealed and opened for one bound flow and run: pure.
pub struct Seal {
    key: Option<LessSafeKey>,
    /// The bound flow and the object's uid: a record is opened only for them.
    aad: String,
    work: String,
}

impl Seal {
    /// Records of object `object_uid`'s run `work` for bound flow `(namespace, name)`, under
    /// the controller's approval `key` (None: none can be sealed or opened).
    pub fn new(
        key: Option<&Key>,
        (namespace, name): (&str, &str),
        object_uid: &str,
        work: &str,
    ) -> Seal {
        let key = key.map(|k| {
            let derived = k.derive(PURPOSE);
            let bytes = ring::digest::digest(&ring::digest::SHA256, derived.text().as_bytes());
            let unbound = UnboundKey::new(&CHACHA20_POLY1305, bytes.as_ref()).expect("32 bytes");
            LessSafeKey::new(unbound)
        });
        Seal {
            key,
            aad: format!("pseudoflow-progress\0{namespace}\0{name}\0{object_uid}"),
            work: work.to_string(),
        }
    }

    /// The annotation's text for `p`.
    pub fn seal(&self, p: &Progress) -> Result<String, NotKept> {
        let key = self.key.as_ref().ok_or(NotKept::NoKey)?;
        let mut bytes = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut bytes)
            .expect("the operating system provides randomness");
        let mut data = serde_json::to_vec(p).expect("a record serialises");
        let nonce = Nonce::assume_unique_for_key(bytes);
        let aad = Aad::from(self.aad.as_bytes());
        key.seal_in_place_append_tag(nonce, aad, &mut data)
            .expect("sealing a record of bounded size");
        let mut sealed = bytes.to_vec();
        sealed.extend(data);
        let text = format!("{VERSION}{}", URL_SAFE_NO_PAD.encode(sealed));
        match text.len() {
            n if n > MAX_PROGRESS_BYTES => Err(NotKept::TooLarge(n)),
            _ => Ok(text),
        }
    }

    /// The record `raw` holds, if sealed for this flow and object and of this run.
    pub fn open(&self, raw: &str) -> Option<Progress> {
        let key = self.key.as_ref()?;
        let mut sealed = URL_SAFE_NO_PAD.decode(raw.strip_prefix(VERSION)?).ok()?;
        if sealed.len() < NONCE_LEN {
            return None;
        }
        let mut data = sealed.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&sealed).ok()?;
        let aad = Aad::from(self.aad.as_bytes());
        let plain = key.open_in_place(nonce, aad, &mut data).ok()?;
        let p: Progress = serde_json::from_slice(plain).ok()?;
        (p.work == self.work).then_some(p)
    }
}

/// Keeps one object's run progress for one bound flow: its [`Seal`] and where it writes.
pub struct Keeper {
    seal: Seal,
    annotation: String,
    objects: Api<DynamicObject>,
    object: String,
    /// A record is on the object (found at the start, or written since): the run's end removes
    /// it.
    kept: AtomicBool,
}

impl Keeper {
    /// The keeper of object `obj`'s run `work` for bound flow `flow` (namespace, name), writing
    /// through `objects` (as the flow's ServiceAccount) under annotation `annotation`.
    pub fn new(
        key: Option<&Key>,
        flow: (&str, &str),
        obj: &DynamicObject,
        objects: Api<DynamicObject>,
        (annotation, work): (String, &str),
    ) -> Keeper {
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        let kept = obj
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(&annotation));
        Keeper {
            seal: Seal::new(key, flow, uid, work),
            annotation,
            objects,
            object: obj.metadata.name.clone().unwrap_or_default(),
            kept: AtomicBool::new(kept),
        }
    }

    /// Which run of the object this is.
    pub fn work(&self) -> &str {
        &self.seal.work
    }

    /// The record on `obj` this keeper believes: sealed for this flow and object, and of this
    /// very run.
    pub fn found(&self, obj: &DynamicObject) -> Option<Progress> {
        let annotations = obj.metadata.annotations.as_ref()?;
        self.seal.open(annotations.get(&self.annotation)?)
    }

    /// Writes `p` on the object.
    pub async fn keep(&self, p: &Progress) -> Result<(), NotKept> {
        let text = self.seal.seal(p)?;
        self.patch(Value::String(text))
            .await
            .map_err(|e| NotKept::Write(e.to_string()))?;
        self.kept.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// What a patch of the object's annotations at the run's end adds to remove the record:
    /// nothing when there is none.
    pub fn removal(&self) -> Option<(String, Value)> {
        self.kept
            .load(Ordering::Relaxed)
            .then(|| (self.annotation.clone(), Value::Null))
    }

    /// Removes the record (a failed `onDelete` run, which writes no served mark, so that its next
    /// attempt starts from its first step). One that cannot be removed is left: the next attempt
    /// resumes it, ends as it ended, and removes it then.
    pub async fn remove(&self) {
        if self.removal().is_some() && self.patch(Value::Null).await.is_ok() {
            self.kept.store(false, Ordering::Relaxed);
        }
    }

    async fn patch(&self, value: Value) -> kube::Result<()> {
        let patch = json!({"metadata": {"annotations": {&self.annotation: value}}});
        let pp = PatchParams::default();
        let patch = Patch::Merge(&patch);
        self.objects
            .patch(&self.object, &pp, &patch)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests;
