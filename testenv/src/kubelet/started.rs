//! Which pods a kubelet incarnation started, with the pid of each running process: the pod
//! watch (`pod.rs`) adds and removes them, the process runners (`pod.rs`'s stand-ins,
//! `runner.rs`) record pids and ask whether a pod is still wanted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Pods this kubelet has started (by uid), with the pid of a running process if any.
pub(super) type StartedHandle = Arc<Mutex<HashMap<String, Option<u32>>>>;

/// Records the pid of a pod's process so deletion can kill it.
pub(super) fn set_pid(started: &StartedHandle, uid: &str, pid: Option<u32>) {
    if let Some(slot) = started.lock().unwrap().get_mut(uid) {
        *slot = pid;
    }
}

/// False once the pod was deleted (its end need not be reported).
pub(super) fn still_wanted(started: &StartedHandle, uid: &str) -> bool {
    started.lock().unwrap().contains_key(uid)
}
