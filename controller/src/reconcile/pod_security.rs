//! Node steps run in privileged, hostPID pods with the host's `/` mounted: root on the node. They
//! fail closed: a namespace must opt in twice, by the label Pod Security admission enforces
//! (`enforce=privileged`, set by whoever may label namespaces) and by the controller's allow-list
//! (`--node-step-namespaces`, set by whoever installs the controller). Checking both before a node
//! Job exists turns "no opt-in" into an immediate failure that says what to do, instead of root
//! on a node (unlabelled namespace, permissive cluster default) or a Job whose pod admission
//! silently refuses until the run times out (`baseline`, `restricted`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

/// The label Pod Security admission enforces (`privileged`, `baseline` or `restricted`).
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// The controller's half of the opt-in: the namespaces whose flows may run node steps
/// (`--node-step-namespaces`, chart value `nodeSteps.namespaces`). Empty by default, so a
/// controller started without the flag runs no node step anywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStepNamespaces(BTreeSet<String>);

impl NodeStepNamespaces {
    /// Adds the namespaces of one flag value: a name or a comma-separated list of names.
    pub fn add_flag_value(&mut self, value: &str) {
        self.0.extend(
            value
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(String::from),
        );
    }

    /// Whether flows of `namespace` may run node steps, as far as the controller is concerned.
    pub fn allows(&self, namespace: &str) -> bool {
        self.0.contains(namespace)
    }

    /// The allowed namespaces, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

impl<S: Into<String>> FromIterator<S> for NodeStepNamespaces {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        NodeStepNamespaces(iter.into_iter().map(Into::into).collect())
    }
}

/// Why node steps may not run in a namespace: which halves of the opt-in it lacks, and how to
/// give them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "node steps run as root on the node and are refused in namespace {namespace:?}: {}; they \
     need both the namespace label {ENFORCE_LABEL}=privileged and the namespace listed in the \
     controller's --node-step-namespaces (Helm value nodeSteps.namespaces), see docs/security.md",
    missing(.level.as_deref(), *.listed)
)]
pub struct NodeStepsRefused {
    /// The flow's namespace.
    pub namespace: String,
    /// Its `enforce` label, if any.
    pub level: Option<String>,
    /// Whether the controller's allow-list names it.
    pub listed: bool,
}

/// What a namespace lacks, in words.
fn missing(level: Option<&str>, listed: bool) -> String {
    let label = match level {
        Some("privileged") => None,
        Some(level) => Some(format!(
            "it enforces Pod Security level {level:?} (label {ENFORCE_LABEL}={level}), which \
             forbids the privileged, hostPID pods node steps run in"
        )),
        None => Some(format!("it has no {ENFORCE_LABEL} label")),
    };
    let list = (!listed).then(|| "it is not in the controller's --node-step-namespaces".into());
    [label, list]
        .into_iter()
        .flatten()
        .collect::<Vec<String>>()
        .join(", and ")
}

/// The verdict for `namespace`, labelled `enforce=level` (or not), given the allow-list: `None`
/// only when both halves of the opt-in are there.
pub fn refusal(
    allowed: &NodeStepNamespaces,
    namespace: &str,
    level: Option<&str>,
) -> Option<NodeStepsRefused> {
    let listed = allowed.allows(namespace);
    if listed && level == Some("privileged") {
        return None;
    }
    Some(NodeStepsRefused {
        namespace: namespace.to_string(),
        level: level.map(String::from),
        listed,
    })
}

/// Reads the namespace's enforce label and returns [`refusal`]'s verdict under the controller's
/// allow-list.
pub async fn check(
    client: &kube::Client,
    allowed: &NodeStepNamespaces,
    namespace: &str,
) -> Result<Option<NodeStepsRefused>, kube::Error> {
    let ns = Api::<Namespace>::all(client.clone()).get(namespace).await?;
    let level = ns
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ENFORCE_LABEL))
        .map(String::as_str);
    Ok(refusal(allowed, namespace, level))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowing(names: &[&str]) -> NodeStepNamespaces {
        names.iter().copied().collect()
    }

    #[test]
    fn only_a_privileged_namespace_in_the_allow_list_admits_node_steps() {
        let ops = allowing(&["ops"]);
        assert_eq!(refusal(&ops, "ops", Some("privileged")), None);
        for level in [None, Some("baseline"), Some("restricted")] {
            assert!(refusal(&ops, "ops", level).is_some(), "{level:?}");
        }
        let nobody = NodeStepNamespaces::default();
        for level in [None, Some("privileged"), Some("baseline")] {
            assert!(refusal(&nobody, "ops", level).is_some(), "{level:?}");
        }
        assert!(refusal(&allowing(&["kube-system"]), "ops", Some("privileged")).is_some());
    }

    #[test]
    fn the_message_names_the_namespace_what_it_lacks_and_both_requirements() {
        let both = |msg: &str| {
            assert!(msg.contains("namespace \"ops\""), "{msg}");
            assert!(
                msg.contains(&format!("{ENFORCE_LABEL}=privileged")),
                "{msg}"
            );
            assert!(msg.contains("--node-step-namespaces"), "{msg}");
            assert!(msg.contains("nodeSteps.namespaces"), "{msg}");
        };
        let unlabelled = refusal(&allowing(&[]), "ops", None).unwrap().to_string();
        both(&unlabelled);
        assert!(
            unlabelled.contains(&format!("it has no {ENFORCE_LABEL} label"))
                && unlabelled.contains("it is not in the controller's --node-step-namespaces"),
            "{unlabelled}"
        );
        let unlisted = refusal(&allowing(&[]), "ops", Some("privileged"))
            .unwrap()
            .to_string();
        both(&unlisted);
        assert!(
            unlisted.contains("it is not in the controller's"),
            "{unlisted}"
        );
        assert!(!unlisted.contains("has no"), "{unlisted}");
        for level in ["baseline", "restricted"] {
            let msg = refusal(&allowing(&["ops"]), "ops", Some(level))
                .unwrap()
                .to_string();
            both(&msg);
            assert!(
                msg.contains(&format!("Pod Security level {level:?}"))
                    && msg.contains(&format!("{ENFORCE_LABEL}={level}")),
                "{msg}"
            );
            assert!(!msg.contains("it is not in"), "{msg}");
        }
    }

    #[test]
    fn the_flag_takes_one_name_or_a_comma_separated_list_and_repeats() {
        let mut allowed = NodeStepNamespaces::default();
        allowed.add_flag_value("kube-system");
        allowed.add_flag_value("node-ops, infra,,");
        assert_eq!(
            allowed.names().collect::<Vec<_>>(),
            ["infra", "kube-system", "node-ops"]
        );
        assert!(allowed.allows("node-ops") && !allowed.allows(""));
    }
}
