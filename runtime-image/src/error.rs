//! Why a step failed, in the words the flow's author reads in status. Bad input is kept apart
//! from step failures because it is a controller/compiler bug (exit code 2), not the flow's.

use kube::core::Status;

/// A step that could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The input document or the step does not make sense for the task (exit code 2).
    #[error("invalid input: {0}")]
    Input(String),
    /// The step ran and failed; the message says why (never containing secret values).
    #[error("{0}")]
    Failed(String),
}

impl StepError {
    /// A step failure with a message.
    pub fn failed(message: impl std::fmt::Display) -> Self {
        StepError::Failed(message.to_string())
    }

    /// Bad input with a message.
    pub fn input(message: impl std::fmt::Display) -> Self {
        StepError::Input(message.to_string())
    }
}

/// What an API call was trying to do, so errors (above all 403s) can say it plainly.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// `get`, `list`, `watch`, `patch`, `create`, `delete`.
    pub verb: &'a str,
    /// Plural resource name, with subresource if any (`pods/exec`).
    pub resource: &'a str,
    /// Object name; empty for list/watch of many.
    pub name: &'a str,
    /// Namespace; None for cluster-scoped resources.
    pub namespace: Option<&'a str>,
}

/// The API status of a kube error, if the server answered with one.
pub fn api_status(e: &kube::Error) -> Option<&Status> {
    match e {
        kube::Error::Api(s) => Some(s),
        _ => None,
    }
}

/// True when the server answered 404 Not Found.
pub fn is_not_found(e: &kube::Error) -> bool {
    api_status(e).is_some_and(|s| s.code == 404)
}

/// True when the server answered 403 Forbidden.
pub fn is_forbidden(e: &kube::Error) -> bool {
    api_status(e).is_some_and(|s| s.code == 403)
}

/// Renders an API error for the flow's author; a 403 names the identity, the verb, the resource,
/// the object and the step path, so a missing RBAC rule is obvious from status alone.
pub fn describe(e: &kube::Error, call: Call, identity: (&str, &str), path: &str) -> String {
    let what = if call.name.is_empty() {
        call.resource.to_string()
    } else {
        format!("{} {:?}", call.resource, call.name)
    };
    let scope = match call.namespace {
        Some(ns) => format!(" in namespace {ns}"),
        None => String::new(),
    };
    match api_status(e) {
        Some(s) if s.code == 403 => format!(
            "{path}: forbidden: serviceaccount {}/{} cannot {} {what}{scope} ({})",
            identity.0, identity.1, call.verb, s.message
        ),
        Some(s) => format!("{} {what}{scope}: {} ({})", call.verb, s.message, s.code),
        None => format!("{} {what}{scope}: {e}", call.verb),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            Status {
                code,
                message: message.into(),
                ..Default::default()
            }
            .boxed(),
        )
    }

    #[test]
    fn forbidden_names_identity_verb_object_and_path() {
        let e = status(403, "nodes \"n1\" is forbidden");
        let call = Call {
            verb: "patch",
            resource: "nodes",
            name: "n1",
            namespace: None,
        };
        let msg = describe(&e, call, ("ops", "runner"), "spec.steps[2]");
        assert!(is_forbidden(&e));
        assert!(
            msg.starts_with(
                "spec.steps[2]: forbidden: serviceaccount ops/runner cannot patch nodes \"n1\""
            ),
            "{msg}"
        );
    }

    #[test]
    fn other_errors_keep_the_api_message() {
        let e = status(404, "not there");
        let call = Call {
            verb: "get",
            resource: "configmaps",
            name: "x",
            namespace: Some("ns"),
        };
        assert!(is_not_found(&e));
        assert_eq!(
            describe(&e, call, ("a", "b"), "p"),
            "get configmaps \"x\" in namespace ns: not there (404)"
        );
    }
}
