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
