//! Which pods a drain evicts, as `kubectl drain` decides: finished pods, mirror pods (the
//! kubelet's static pods) and DaemonSet pods stay (a DaemonSet would put them back at once);
//! pods the flow's skip selector matches stay; the drain's own executor pod stays (evicting it
//! would stop the drain). A pod with emptyDir data is only evicted when the flow allows it.

use k8s_openapi::api::core::v1::Pod;
use pseudoflow_crd::selector::Selector;

/// The annotation the kubelet puts on the API copy of a static pod.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The pods of a node sorted into what happens to them.
#[derive(Debug, Default, PartialEq)]
pub struct Selection {
    /// Pods to evict (`namespace/name`, uid).
    pub evict: Vec<(String, String, String)>,
    /// Pods left alone and why (`namespace/name (DaemonSet)`), for the step's message.
    pub kept: Vec<String>,
    /// Pods that have emptyDir volumes while `deleteEmptyDirData` is off.
    pub refused: Vec<String>,
}

/// What the drain knows about itself and the flow's wishes.
pub struct Rules<'a> {
    /// Pods matching this stay.
    pub skip: Option<&'a Selector>,
    /// The drain's own pod (`namespace`, Job name): pods with that `job-name` stay.
    pub own_job: Option<(&'a str, &'a str)>,
    /// Whether pods with emptyDir volumes may be evicted.
    pub delete_empty_dir_data: bool,
}

fn why_kept(pod: &Pod, rules: &Rules) -> Option<&'static str> {
    let meta = &pod.metadata;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Some("finished");
    }
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
    {
        return Some("mirror pod");
    }
    let by_daemon_set = meta.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true) && o.kind == "DaemonSet" && o.api_version.starts_with("apps/")
    });
    if by_daemon_set {
        return Some("DaemonSet");
    }
    let labels = meta.labels.clone().unwrap_or_default();
    if rules.skip.is_some_and(|s| s.matches(&labels)) {
        return Some("skipSelector");
    }
    if let Some((ns, job)) = rules.own_job {
        if meta.namespace.as_deref() == Some(ns)
            && labels.get("job-name").map(String::as_str) == Some(job)
        {
            return Some("this drain's own pod");
        }
    }
    None
}

fn has_empty_dir(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|v| v.iter().any(|v| v.empty_dir.is_some()))
}

/// Sorts `pods` (those bound to the node) by `rules`.
pub fn select(pods: &[Pod], rules: &Rules) -> Selection {
    let mut out = Selection::default();
    for pod in pods {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let id = format!("{ns}/{name}");
        if let Some(why) = why_kept(pod, rules) {
            out.kept.push(format!("{id} ({why})"));
        } else if has_empty_dir(pod) && !rules.delete_empty_dir_data {
            out.refused.push(id);
        } else {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            out.evict.push((ns, name, uid));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn rules<'a>(skip: Option<&'a Selector>, empty_dir: bool) -> Rules<'a> {
        Rules {
            skip,
            own_job: Some(("flows", "drain-job")),
            delete_empty_dir_data: empty_dir,
        }
    }

    #[test]
    fn daemon_set_mirror_finished_skipped_and_own_pods_stay() {
        let pods = [
            pod(
                json!({"metadata": {"namespace": "a", "name": "ds", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": "1", "controller": true}]}}),
            ),
            pod(
                json!({"metadata": {"namespace": "kube-system", "name": "static",
                "annotations": {"kubernetes.io/config.mirror": "abc"}}}),
            ),
            pod(
                json!({"metadata": {"namespace": "a", "name": "done"}, "status": {"phase": "Succeeded"}}),
            ),
            pod(
                json!({"metadata": {"namespace": "a", "name": "agent", "labels": {"app": "agent"}}}),
            ),
            pod(
                json!({"metadata": {"namespace": "flows", "name": "me", "labels": {"job-name": "drain-job"}}}),
            ),
            pod(
                json!({"metadata": {"namespace": "other", "name": "same-job-name", "labels": {"job-name": "drain-job"}, "uid": "u2"}}),
            ),
            pod(
                json!({"metadata": {"namespace": "a", "name": "web", "uid": "u1",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "2", "controller": true}]}}),
            ),
        ];
        let skip = Selector::parse("app=agent").unwrap();
        let s = select(&pods, &rules(Some(&skip), false));
        assert_eq!(
            s.evict,
            [
                ("other".into(), "same-job-name".into(), "u2".into()),
                ("a".into(), "web".into(), "u1".into())
            ]
        );
        assert_eq!(
            s.kept,
            [
                "a/ds (DaemonSet)",
                "kube-system/static (mirror pod)",
                "a/done (finished)",
                "a/agent (skipSelector)",
                "flows/me (this drain's own pod)"
            ]
        );
        assert!(s.refused.is_empty());
    }

    #[test]
    fn empty_dir_pods_are_refused_unless_allowed() {
        let pods = [pod(
            json!({"metadata": {"namespace": "a", "name": "cache", "uid": "u"},
            "spec": {"containers": [], "volumes": [{"name": "tmp", "emptyDir": {}}]}}),
        )];
        let s = select(&pods, &rules(None, false));
        assert_eq!(s.refused, ["a/cache"]);
        assert!(s.evict.is_empty());
        let s = select(&pods, &rules(None, true));
        assert_eq!(s.evict.len(), 1);
        assert!(s.refused.is_empty());
    }
}
