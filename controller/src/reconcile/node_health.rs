//! Whether the node a step's Job is pinned to can still report. A node step's pod runs on one
//! named node; if that node's kubelet is gone, nothing will ever report the pod's end, and a
//! step without `timeoutSeconds` (its Job has no deadline) would wait for the node forever.
//! The node-lifecycle controller marks such a node `Ready=Unknown` once its grace period passes
//! without heartbeats; from then on the step fails, naming the node, and its Job is deleted so a
//! node that comes back does not go on running it. `Ready=False` is not enough: the kubelet is
//! still there and reports the pod itself (docs/operations.md, "When a node dies").
//!
//! The controller watches Nodes (RBAC: nodes list/watch). Without that watch it cannot tell a
//! dead node from a slow step, so node steps fail closed with a message saying so.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::raw::RawFlow;

/// The Node watch's view, shared by every reconcile and the watch's trigger.
#[derive(Default)]
pub struct NodeHealth {
    /// The watched Nodes; unset until the controller starts the watch.
    store: OnceLock<Store<Node>>,
    /// Why the watch cannot run (it was refused), if it was.
    refused: Mutex<Option<String>>,
    /// Whether the watch has fared at all yet (listed, or been refused).
    settled: std::sync::atomic::AtomicBool,
    /// The nodes each flow (`namespace/name`) has a running node Job on.
    running: Mutex<HashMap<(String, String), BTreeSet<String>>>,
}

impl NodeHealth {
    /// Connects the view to the controller's Node watch.
    pub fn attach(&self, store: Store<Node>) {
        let _ = self.store.set(store);
    }

    /// Records how the Node watch last fared: `Some(why)` when the API refused it.
    pub fn watch_refused(&self, why: Option<String>) {
        *self.refused.lock().expect("not poisoned") = why;
        self.settled
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Waits, at most `limit`, until the Node watch has listed or been refused: a node step
    /// the controller starts right after it started is judged on what the watch found, not
    /// let through because the watch had not answered yet. No wait without a watch.
    pub async fn settled(&self, limit: std::time::Duration) {
        let until = tokio::time::Instant::now() + limit;
        while self.store.get().is_some()
            && !self.settled.load(std::sync::atomic::Ordering::Acquire)
            && tokio::time::Instant::now() < until
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Why node steps cannot be watched over (so must not start), if they cannot.
    pub fn blind(&self) -> Option<String> {
        self.refused
            .lock()
            .expect("not poisoned")
            .as_ref()
            .map(|why| {
                format!(
                "the controller cannot watch Nodes ({why}), so it could not tell a dead node from \
                 a slow step; node steps do not start until its RBAC allows nodes list and watch"
            )
            })
    }

    /// Why `node` can no longer report a pod's end, if it cannot: its kubelet stopped posting
    /// status (Ready=Unknown) or the Node object is gone while the watch is synced.
    pub fn lost(&self, node: &str) -> Option<String> {
        let store = self.store.get()?;
        let Some(n) = store.get(&ObjectRef::new(node)) else {
            return (!store.is_empty()).then(|| format!("node {node} was deleted"));
        };
        let ready = n
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready")?;
        (ready.status == "Unknown").then(|| {
            let why = ready.message.as_deref().unwrap_or("no heartbeat");
            format!("node {node} is NotReady ({why})")
        })
    }

    /// Records the nodes flow `ns/name` has running node Jobs on (its `jobs`).
    pub fn track<'j>(&self, ns: &str, name: &str, jobs: impl Iterator<Item = &'j Job>) {
        let nodes: BTreeSet<String> = jobs.filter(|j| !ended(j)).filter_map(pinned_node).collect();
        let key = (ns.to_string(), name.to_string());
        let mut running = self.running.lock().expect("not poisoned");
        if nodes.is_empty() {
            running.remove(&key);
        } else {
            running.insert(key, nodes);
        }
    }

    /// The flows to look at again because `node` changed: those with a Job on it, if it is lost.
    pub fn flows_on(&self, node: &Node) -> Vec<ObjectRef<RawFlow>> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if self.lost(name).is_none() && !is_unknown(node) {
            return Vec::new();
        }
        self.running
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|(_, nodes)| nodes.contains(name))
            .map(|((ns, flow), _)| ObjectRef::new(flow).within(ns))
            .collect()
    }
}

/// The part of a Node the view reads: its name and its `Ready` condition. The watch keeps only
/// this, so a cluster's Nodes (images, addresses, labels, managedFields — tens of KiB each) do
/// not sit in the controller's memory (with 1,000 flows, they would dominate its RSS).
pub fn keep_readiness(node: &mut Node) {
    let name = node.metadata.name.take();
    let version = node.metadata.resource_version.take();
    node.metadata = Default::default();
    node.metadata.name = name;
    node.metadata.resource_version = version;
    node.spec = None;
    let ready = node
        .status
        .take()
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"));
    node.status = ready.map(|c| k8s_openapi::api::core::v1::NodeStatus {
        conditions: Some(vec![c]),
        ..Default::default()
    });
}

/// The node a Job's pod is pinned to (node steps set `nodeName`).
pub fn pinned_node(job: &Job) -> Option<String> {
    job.spec.as_ref()?.template.spec.as_ref()?.node_name.clone()
}

fn ended(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                matches!(c.type_.as_str(), "Complete" | "Failed" | "FailureTarget")
                    && c.status == "True"
            })
        })
}

fn is_unknown(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "Unknown")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn node(name: &str, ready: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                "message": "Kubelet stopped posting node status."}]}
        }))
        .unwrap()
    }

    fn job(node: Option<&str>, ended: bool) -> Job {
        let conditions = if ended {
            json!([{"type": "Complete", "status": "True"}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "spec": {"template": {"spec": {"nodeName": node, "containers": []}}},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    fn health(nodes: &[Node]) -> NodeHealth {
        let mut writer = Writer::<Node>::default();
        for n in nodes {
            writer.apply_watcher_event(&Event::Apply(n.clone()));
        }
        let h = NodeHealth::default();
        h.attach(writer.as_reader());
        h
    }

    #[test]
    fn only_a_node_whose_kubelet_stopped_reporting_is_lost() {
        let h = health(&[node("a", "True"), node("b", "False"), node("c", "Unknown")]);
        assert_eq!(h.lost("a"), None);
        assert_eq!(h.lost("b"), None, "Ready=False: the kubelet still reports");
        let why = h.lost("c").unwrap();
        assert!(why.contains("node c is NotReady"), "{why}");
        assert!(why.contains("stopped posting"), "{why}");
        assert_eq!(h.lost("gone").as_deref(), Some("node gone was deleted"));
    }

    #[test]
    fn nothing_is_lost_before_the_watch_has_seen_any_node() {
        assert_eq!(NodeHealth::default().lost("a"), None);
        assert_eq!(health(&[]).lost("a"), None);
    }

    #[test]
    fn a_lost_node_wakes_only_the_flows_with_a_running_job_on_it() {
        let h = health(&[node("a", "True"), node("c", "Unknown")]);
        h.track("ns", "on-c", [job(Some("c"), false)].iter());
        h.track("ns", "ended-on-c", [job(Some("c"), true)].iter());
        h.track("ns", "api", [job(None, false)].iter());
        h.track("ns", "on-a", [job(Some("a"), false)].iter());
        let woken = h.flows_on(&node("c", "Unknown"));
        assert_eq!(woken, vec![ObjectRef::new("on-c").within("ns")]);
        assert!(h.flows_on(&node("a", "True")).is_empty());
        // The flow's Job ended: it is no longer woken.
        h.track("ns", "on-c", [job(Some("c"), true)].iter());
        assert!(h.flows_on(&node("c", "Unknown")).is_empty());
    }

    #[test]
    fn a_refused_watch_keeps_node_steps_from_starting_until_it_works() {
        let h = NodeHealth::default();
        assert_eq!(h.blind(), None);
        h.watch_refused(Some("403 Forbidden".into()));
        assert!(h.blind().unwrap().contains("nodes list and watch"));
        h.watch_refused(None);
        assert_eq!(h.blind(), None);
    }

    #[test]
    fn the_watch_keeps_only_a_nodes_name_and_readiness_and_still_tells_a_lost_node() {
        let mut full: Node = serde_json::from_value(json!({
            "metadata": {"name": "c", "resourceVersion": "7",
                "labels": {"kubernetes.io/hostname": "c"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "Unknown", "message": "Kubelet stopped posting node status."}
                ],
                "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 1}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.3"}]
            }
        }))
        .unwrap();
        keep_readiness(&mut full);
        assert_eq!(
            serde_json::to_value(&full).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "c", "resourceVersion": "7"},
                "status": {"conditions": [{"type": "Ready", "status": "Unknown",
                    "message": "Kubelet stopped posting node status."}]}
            })
        );
        let h = health(&[full]);
        assert!(h.lost("c").unwrap().contains("stopped posting"));
    }
}
