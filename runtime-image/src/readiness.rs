//! Pure readiness checks for `waitFor`, on an object's JSON: Ready, Available (workload
//! rollouts), Healthy (kstatus "Current"). Each returns whether the state is reached and a
//! short description of what was seen, which a timeout message repeats.

use serde_json::Value;

/// The verdict on one observation of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The awaited state is reached.
    pub done: bool,
    /// What was seen, e.g. `2/3 available`.
    pub note: String,
}

impl Seen {
    fn new(done: bool, note: impl Into<String>) -> Self {
        Seen {
            done,
            note: note.into(),
        }
    }
}

/// The status (`True`/`False`/`Unknown`) of condition `ty`, if present.
pub fn condition(obj: &Value, ty: &str) -> Option<String> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        .and_then(|c| c.get("status").and_then(Value::as_str))
        .map(str::to_string)
}

/// Condition Ready=True.
pub fn ready(obj: &Value) -> Seen {
    match condition(obj, "Ready") {
        Some(s) => Seen::new(s == "True", format!("condition Ready={s}")),
        None => Seen::new(false, "no Ready condition yet"),
    }
}

fn int(obj: &Value, ptr: &str) -> Option<i64> {
    obj.pointer(ptr).and_then(Value::as_i64)
}

/// `None` when status.observedGeneration has caught up with metadata.generation, else a note.
fn generation_lag(obj: &Value) -> Option<String> {
    let generation = int(obj, "/metadata/generation")?;
    match int(obj, "/status/observedGeneration") {
        Some(seen) if seen >= generation => None,
        seen => Some(format!(
            "observedGeneration {} < generation {generation}",
            seen.map_or("none".into(), |s| s.to_string())
        )),
    }
}

/// kstatus' generation check: a stale status.observedGeneration means in progress; an absent
/// one is not checked (many custom resources never report it).
fn observed_lag(obj: &Value) -> Option<String> {
    obj.pointer("/status/observedGeneration")?;
    generation_lag(obj)
}

/// Workloads rolled out and available, observed generation current; other kinds: condition
/// Available=True.
pub fn available(kind: &str, obj: &Value) -> Seen {
    let workload = matches!(
        kind,
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet"
    );
    if !workload {
        return match condition(obj, "Available") {
            Some(s) => Seen::new(s == "True", format!("condition Available={s}")),
            None => Seen::new(false, "no Available condition yet"),
        };
    }
    if let Some(lag) = generation_lag(obj) {
        return Seen::new(false, lag);
    }
    let st = |f: &str| int(obj, &format!("/status/{f}")).unwrap_or(0);
    if kind == "DaemonSet" {
        let desired = st("desiredNumberScheduled");
        let (avail, updated) = (st("numberAvailable"), st("updatedNumberScheduled"));
        let done = avail == desired && updated == desired;
        return Seen::new(
            done,
            format!("{avail}/{desired} available, {updated}/{desired} updated"),
        );
    }
    let desired = int(obj, "/spec/replicas").unwrap_or(1);
    let (avail, ready, updated, total) = (
        st("availableReplicas"),
        st("readyReplicas"),
        st("updatedReplicas"),
        st("replicas"),
    );
    let note = format!("{avail}/{desired} available, {ready}/{desired} ready");
    let done = match kind {
        "Deployment" => avail == desired && updated == desired && total <= desired,
        "StatefulSet" => {
            let on_delete = obj
                .pointer("/spec/updateStrategy/type")
                .and_then(Value::as_str)
                == Some("OnDelete");
            ready == desired && avail == desired && (on_delete || updated == desired)
        }
        _ => avail == desired && ready == desired,
    };
    Seen::new(done, format!("{note}, {updated}/{desired} updated"))
}

/// kstatus "Current": not terminating, observed generation current, workloads available,
/// Ready/Available conditions true when present, no failed/stalled condition.
pub fn healthy(kind: &str, obj: &Value) -> Seen {
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        return Seen::new(false, "terminating");
    }
    if let Some(lag) = observed_lag(obj) {
        return Seen::new(false, lag);
    }
    match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => return available(kind, obj),
        "Pod" => {
            let phase = obj
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("");
            let done = phase == "Succeeded"
                || (phase == "Running" && condition(obj, "Ready").as_deref() == Some("True"));
            return Seen::new(done, format!("phase {phase}"));
        }
        "PersistentVolumeClaim" => {
            let phase = obj
                .pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("");
            return Seen::new(phase == "Bound", format!("phase {phase}"));
        }
        "Job" => {
            let complete = condition(obj, "Complete").as_deref() == Some("True");
            let failed = condition(obj, "Failed").as_deref() == Some("True");
            let note = if failed {
                "job failed"
            } else if complete {
                "complete"
            } else {
                "running"
            };
            return Seen::new(complete, note);
        }
        _ => {}
    }
    for bad in ["Failed", "Stalled", "Degraded", "Reconciling"] {
        if condition(obj, bad).as_deref() == Some("True") {
            return Seen::new(false, format!("condition {bad}=True"));
        }
    }
    for good in ["Ready", "Available"] {
        if let Some(s) = condition(obj, good) {
            if s != "True" {
                return Seen::new(false, format!("condition {good}={s}"));
            }
        }
    }
    Seen::new(true, "current")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ready_needs_the_condition_true() {
        let o = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        assert_eq!(ready(&o), Seen::new(false, "condition Ready=False"));
        let o = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert!(ready(&o).done);
        assert!(!ready(&json!({})).done);
    }

    #[test]
    fn deployments_need_current_generation_and_all_replicas() {
        let mut d = json!({"metadata": {"generation": 2}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 1, "availableReplicas": 3, "readyReplicas": 3,
                       "updatedReplicas": 3, "replicas": 3}});
        let s = available("Deployment", &d);
        assert!(
            !s.done && s.note.contains("observedGeneration 1 < generation 2"),
            "{s:?}"
        );
        d["status"]["observedGeneration"] = json!(2);
        assert!(available("Deployment", &d).done);
        d["status"]["availableReplicas"] = json!(2);
        let s = available("Deployment", &d);
        assert!(!s.done && s.note.starts_with("2/3 available"), "{s:?}");
    }

    #[test]
    fn daemonsets_compare_with_desired_scheduled() {
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "desiredNumberScheduled": 2, "numberAvailable": 2, "updatedNumberScheduled": 1}});
        assert!(!available("DaemonSet", &ds).done);
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "desiredNumberScheduled": 2, "numberAvailable": 2, "updatedNumberScheduled": 2}});
        assert!(available("DaemonSet", &ds).done);
    }

    #[test]
    fn other_kinds_use_the_available_condition() {
        let o = json!({"status": {"conditions": [{"type": "Available", "status": "True"}]}});
        assert!(available("APIService", &o).done);
        assert!(!available("APIService", &json!({})).done);
    }

    #[test]
    fn healthy_follows_kstatus() {
        assert!(healthy("ConfigMap", &json!({"metadata": {"name": "x"}})).done);
        let terminating = json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}});
        assert!(!healthy("ConfigMap", &terminating).done);
        let stalled = json!({"status": {"conditions": [{"type": "Stalled", "status": "True"}]}});
        assert!(!healthy("Widget", &stalled).done);
        let pod = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        assert!(healthy("Pod", &pod).done);
        let lagging = json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}});
        assert!(!healthy("Widget", &lagging).done);
        // No observedGeneration at all: kstatus skips the generation check.
        let unobserved = json!({"metadata": {"generation": 3}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert!(healthy("Widget", &unobserved).done);
        // Workloads still need their controller to have observed the spec.
        let fresh = json!({"metadata": {"generation": 1}, "spec": {"replicas": 0}, "status": {}});
        assert!(!healthy("Deployment", &fresh).done);
    }
}
