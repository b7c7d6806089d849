//! Node steps run in privileged, hostPID pods. In a namespace whose Pod Security level forbids
//! that, the Job would be created but its pod never would: the Job controller retries quietly and
//! the flow hangs until its timeout. Reading the namespace's `enforce` label first turns that into
//! an immediate failure that says why and what to do.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::Client;

/// The label Pod Security admission enforces (`privileged`, `baseline` or `restricted`).
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// Why node steps cannot run in a namespace labelled `enforce=level`, or `None` when they can.
/// Only `privileged` (or no label: the cluster default, usually privileged) admits node pods.
pub fn refusal(namespace: &str, level: Option<&str>) -> Option<String> {
    let level = level?;
    if level == "privileged" {
        return None;
    }
    Some(format!(
        "namespace {namespace:?} enforces Pod Security level {level:?} (label \
         {ENFORCE_LABEL}={level}), which forbids the privileged, hostPID pods node steps run in; \
         run node steps from a namespace labelled {ENFORCE_LABEL}=privileged (see docs/security.md)"
    ))
}

/// Reads the namespace's enforce label and returns [`refusal`]'s verdict.
pub async fn check(client: &Client, namespace: &str) -> Result<Option<String>, kube::Error> {
    let ns = Api::<Namespace>::all(client.clone()).get(namespace).await?;
    let level = ns
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ENFORCE_LABEL))
        .map(String::as_str);
    Ok(refusal(namespace, level))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_privileged_or_unlabelled_namespaces_admit_node_pods() {
        assert_eq!(refusal("ops", None), None);
        assert_eq!(refusal("ops", Some("privileged")), None);
        for level in ["baseline", "restricted"] {
            let msg = refusal("ops", Some(level)).expect("refused");
            assert!(msg.contains(&format!("{ENFORCE_LABEL}={level}")), "{msg}");
            assert!(msg.contains("namespace \"ops\""), "{msg}");
            assert!(msg.contains("privileged"), "{msg}");
        }
    }
}
