//! What in an object's metadata says someone wants something of it: its identity, its spec's
//! generation, labels, annotations, finalizers, deletion and owners. Watches compare it from
//! one event to the next to drop the events that are only a status write coming back (the
//! controller's own, most of the time): each such event cost a reconcile that read the run
//! state, or the object and its child flow, again for nothing.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A hash of what in `m` asks for something (not `resourceVersion`, `managedFields`, status).
pub fn metadata_intent(m: &ObjectMeta) -> u64 {
    let mut h = DefaultHasher::new();
    add_metadata_intent(m, &mut h);
    h.finish()
}

/// Prefix of the finalizers bound flows put on their objects (`bind::object::finalizer_name`).
pub const BOUND_FINALIZER_PREFIX: &str = "ops.example.com/flow-";

/// [`metadata_intent`] of an object a bound flow serves, leaving out what bound flows write on
/// it themselves: served marks, child marks and their finalizers. The echo of each of those
/// writes woke the flow for a read of the object that found nothing to do (2 of the 3 reads of
/// each Database seed 001's flow served, issue #41). A tenant who edits them gains nothing:
/// the object is served again at its next change or the flow's next full pass, as before.
pub fn bound_object_intent(m: &ObjectMeta) -> u64 {
    let ours = |k: &str| {
        k.starts_with(pseudoflow_crd::protocol::served::SERVED_PREFIX)
            || k.starts_with(pseudoflow_crd::bind::CHILD_MARK_PREFIX)
    };
    let mut h = DefaultHasher::new();
    m.uid.hash(&mut h);
    m.generation.hash(&mut h);
    for (k, v) in m.annotations.iter().flatten().filter(|(k, _)| !ours(k)) {
        (k, v).hash(&mut h);
    }
    m.labels.hash(&mut h);
    let finalizers = m.finalizers.iter().flatten();
    for f in finalizers.filter(|f| !f.starts_with(BOUND_FINALIZER_PREFIX)) {
        f.hash(&mut h);
    }
    m.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    for owner in m.owner_references.iter().flatten() {
        (&owner.uid, owner.controller).hash(&mut h);
    }
    h.finish()
}

/// Adds [`metadata_intent`]'s fields to `h`, for a hash that covers more than the metadata.
pub fn add_metadata_intent(m: &ObjectMeta, h: &mut impl Hasher) {
    m.uid.hash(h);
    m.generation.hash(h);
    m.annotations.hash(h);
    m.labels.hash(h);
    m.finalizers.hash(h);
    m.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(h);
    for owner in m.owner_references.iter().flatten() {
        (&owner.uid, owner.controller).hash(h);
    }
}
