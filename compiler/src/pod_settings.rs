//! The executor pod's settings a flow (and the cluster's defaults under it) may choose,
//! `spec.options.executor` ([`ExecutorOptions`]), put on the pod template [`crate::lower`]
//! made. Pure, and a no-op without settings, so a flow that sets none gets the pod it always
//! got. Node steps keep their pinning: they run on their node (`nodeName`) and already tolerate
//! every taint, so nodeSelector, affinity and tolerations apply to API steps only.

use pseudoflow_crd::executor::ExecutorOptions;
use serde_json::{json, Value};

/// The step container's resources when a flow and the cluster set none: small, as most steps
/// only call the API.
pub fn default_resources() -> Value {
    json!({"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}})
}

/// `template` with `ex` applied: resources key by key over the defaults, scheduling (API
/// steps only), priorityClassName, imagePullSecrets, and extra labels and annotations beside
/// the controller's own (which validation keeps them from naming; the controller's win anyway).
pub fn apply(mut template: Value, ex: &ExecutorOptions, on_node: bool) -> Value {
    if *ex == ExecutorOptions::default() {
        return template;
    }
    let spec = &mut template["spec"];
    if let Some(r) = &ex.resources {
        let resources = &mut spec["containers"][0]["resources"];
        for (name, q) in &r.requests {
            resources["requests"][name] = json!(q);
        }
        for (name, q) in &r.limits {
            resources["limits"][name] = json!(q);
        }
    }
    if !on_node {
        if !ex.tolerations.is_empty() {
            spec["tolerations"] = json!(ex.tolerations);
        }
        if !ex.node_selector.is_empty() {
            spec["nodeSelector"] = json!(ex.node_selector);
        }
        if let Some(affinity) = &ex.affinity {
            spec["affinity"] = json!(affinity);
        }
    }
    if let Some(pc) = &ex.priority_class_name {
        spec["priorityClassName"] = json!(pc);
    }
    if !ex.image_pull_secrets.is_empty() {
        spec["imagePullSecrets"] = json!(ex.image_pull_secrets);
    }
    let meta = &mut template["metadata"];
    for (field, extra) in [("labels", &ex.labels), ("annotations", &ex.annotations)] {
        for (key, value) in extra {
            if meta[field].get(key).is_none() {
                meta[field][key] = json!(value);
            }
        }
    }
    template
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> Value {
        json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "pseudoflow"}},
               "spec": {"containers": [{"name": "step", "resources": default_resources()}]}})
    }

    fn settings() -> ExecutorOptions {
        serde_json::from_value(json!({
            "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
            "nodeSelector": {"pool": "ops"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "priorityClassName": "ops-high",
            "imagePullSecrets": [{"name": "regcred"}],
            "labels": {"team": "db", "app.kubernetes.io/managed-by": "me"},
            "annotations": {"note": "x"}}))
        .unwrap()
    }

    #[test]
    fn no_settings_leave_the_pod_as_it_was() {
        assert_eq!(
            apply(template(), &ExecutorOptions::default(), false),
            template()
        );
    }

    #[test]
    fn an_api_step_s_pod_gets_every_setting() {
        let t = apply(template(), &settings(), false);
        let spec = &t["spec"];
        assert_eq!(
            spec["containers"][0]["resources"],
            json!({"requests": {"cpu": "1", "memory": "32Mi"}, "limits": {"memory": "256Mi", "nvidia.com/gpu": "1"}})
        );
        assert_eq!(spec["tolerations"][0]["key"], "dedicated");
        assert_eq!(spec["nodeSelector"], json!({"pool": "ops"}));
        assert!(spec["affinity"]["nodeAffinity"].is_object());
        assert_eq!(spec["priorityClassName"], "ops-high");
        assert_eq!(spec["imagePullSecrets"], json!([{"name": "regcred"}]));
        assert_eq!(t["metadata"]["labels"]["team"], "db");
        assert_eq!(
            t["metadata"]["labels"]["app.kubernetes.io/managed-by"], "pseudoflow",
            "the controller's own labels win"
        );
        assert_eq!(t["metadata"]["annotations"]["note"], "x");
    }

    #[test]
    fn a_node_step_keeps_its_pinning() {
        let mut node = template();
        node["spec"]["nodeName"] = json!("n1");
        node["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
        let t = apply(node, &settings(), true);
        let spec = &t["spec"];
        assert_eq!(spec["nodeName"], "n1");
        assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
        assert!(spec.get("nodeSelector").is_none() && spec.get("affinity").is_none());
        assert_eq!(spec["priorityClassName"], "ops-high");
        assert_eq!(spec["imagePullSecrets"], json!([{"name": "regcred"}]));
    }
}
