//! Lists of a bound flow's objects and child flows, read a page at a time and each item cut to
//! what the reconcile reads as it comes: a bound flow serving 1,000 objects would otherwise
//! hold two full lists (every child flow's status with its steps) at once, at every wake. The
//! objects are served a page at a time, as each page comes, each decoded alone. A page is read
//! whole before any of its items is cut, so pages are small, and one is read at a time across
//! all bound flows ([`PAGE_READS`]): 100 objects of 1.2 MB, a page of 100 each under 4 bound
//! flows, took the controller +1,055 MiB before each was refused as too large (issue #42).

use kube::api::{Api, DynamicObject, ListParams, ObjectList};
use tokio::sync::Semaphore;

use super::child::OBJECT_ANNOTATION;
use super::claim::UNREADABLE;
use super::decode::RawPage;
use super::revision::REVISION_ANNOTATION;
use crate::limits::WATCH_PAGE;
use crate::raw::RawFlow;

/// Child flows per LIST request: the most a reconcile holds in full at once (a child carries
/// its object, at most [`super::decode::MAX_OBJECT_BYTES`], besides its flow's steps, and
/// anyone who may create flows can label one a child).
pub const PAGE: u32 = WATCH_PAGE;

/// Objects of a bound kind per LIST request (what anyone who may create them writes; each of
/// up to the API server's 1.5 MiB, read as text before the large ones are cut).
pub const OBJECT_PAGE: u32 = WATCH_PAGE;

/// Pages of objects or children read at once, across all bound flows (the others wait their
/// turn): what is held as text at once is one page (two took 4 bound flows' first passes over
/// 100 objects of 1.2 MB to +88 MiB, one to +53 MiB).
static PAGE_READS: Semaphore = Semaphore::const_new(1);

/// Every flow `lp` selects, `keep` applied to each as its page comes. The flows are decoded as
/// the flows' watch decodes them ([`RawFlow`]): one whose spec is too large or too deep to read
/// (anyone who may create flows can label one a child) is passed on with its metadata and
/// status only, its spec never decoded.
pub async fn list_kept<T>(
    api: &Api<DynamicObject>,
    lp: &ListParams,
    mut keep: impl FnMut(DynamicObject) -> Option<T>,
) -> Result<Vec<T>, kube::Error> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    let client = api.clone().into_client();
    loop {
        let mut page = lp.clone().limit(PAGE);
        if let Some(t) = token.take() {
            page = page.continue_token(&t);
        }
        let request = kube::core::Request::new(api.resource_url())
            .list(&page)
            .map_err(kube::Error::BuildRequest)?;
        let list = {
            let _turn = PAGE_READS.acquire().await.expect("never closed");
            client.request::<ObjectList<RawFlow>>(request).await?
        };
        out.extend(list.items.into_iter().map(as_listed).filter_map(&mut keep));
        match list.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(t) => token = Some(t),
            None => return Ok(out),
        }
    }
}

/// A listed flow as the untyped object the reconcile reads; one whose spec cannot be read, its
/// metadata, status and why ([`UNREADABLE`]).
fn as_listed(flow: RawFlow) -> DynamicObject {
    flow.decode().unwrap_or_else(|e| {
        let mut data = serde_json::json!({ UNREADABLE: e.to_string() });
        if let Some(status) = flow.status_value() {
            data["status"] = status;
        }
        DynamicObject {
            types: None,
            metadata: flow.metadata,
            data,
        }
    })
}

/// One page of the objects `lp` selects, after the page `token` names (the first: `None`),
/// each item left as raw text to be decoded alone ([`super::decode`]): one object serde cannot
/// read does not fail the others.
pub async fn raw_page(
    api: &Api<DynamicObject>,
    lp: &ListParams,
    token: Option<&str>,
) -> Result<RawPage, ListError> {
    let mut page = lp.clone().limit(OBJECT_PAGE);
    if let Some(t) = token {
        page = page.continue_token(t);
    }
    let request = kube::core::Request::new(api.resource_url())
        .list(&page)
        .map_err(|e| ListError::Request(kube::Error::BuildRequest(e)))?;
    let client = api.clone().into_client();
    let _turn = PAGE_READS.acquire().await.expect("never closed");
    let text = client
        .request_text(request)
        .await
        .map_err(ListError::Request)?;
    // Borrowed from `text`: an object too large is measured there, never copied.
    serde_json::from_str(&text).map_err(ListError::Page)
}

/// Why a page of objects could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The request failed.
    #[error(transparent)]
    Request(#[from] kube::Error),
    /// The page is not a list (the items themselves are decoded one by one, later).
    #[error("reading the page: {0}")]
    Page(serde_json::Error),
}

/// A child flow cut to what serving its object and summing up read: metadata, `spec.bound`
/// (the object as it was last run for) and the status's phase, message and last run time.
pub fn slim_child(mut child: DynamicObject) -> DynamicObject {
    let bound = child.data["spec"]["bound"].take();
    let status = run_state(&child);
    let unreadable = child.data[UNREADABLE].take();
    child.metadata.managed_fields = None;
    child.data = serde_json::json!({"spec": {"bound": bound}});
    if let Some(st) = status {
        child.data["status"] = st;
    }
    if !unreadable.is_null() {
        child.data[UNREADABLE] = unreadable;
    }
    child
}

/// A child flow cut to what summing up reads: the object it serves (its annotation), its
/// run's phase, message and last run time, and the revision it was made from.
pub fn child_state(child: DynamicObject) -> (String, DynamicObject) {
    let mut data = match run_state(&child) {
        Some(st) => serde_json::json!({ "status": st }),
        None => serde_json::json!({}),
    };
    let annotations = child.metadata.annotations.unwrap_or_default();
    if let Some(h) = annotations.get(REVISION_ANNOTATION) {
        data["revision"] = serde_json::json!(h);
    }
    // Whether its latest run is for its spec as it is (a rollout counts it on its revision
    // only then: bind/rollout).
    if let Some(g) = child.metadata.generation {
        data["generation"] = serde_json::json!(g);
    }
    let object = annotations
        .get(OBJECT_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let state = DynamicObject {
        types: None,
        metadata: Default::default(),
        data,
    };
    (object, state)
}

/// A child's status cut to its run's phase, message and last run time, and the generation its
/// run was for and when it ended.
fn run_state(child: &DynamicObject) -> Option<serde_json::Value> {
    child.data.get("status").map(|st| {
        serde_json::json!({
            "phase": st["phase"],
            "message": st["message"],
            "lastRunTime": st["lastRunTime"],
            "run": {"generation": st["run"]["generation"], "finishedAt": st["run"]["finishedAt"]},
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slim_child_keeps_what_serving_and_summing_up_read_and_drops_the_rest() {
        let child: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
            "metadata": {"name": "c", "annotations": {"a": "b"}},
            "spec": {"steps": [{"type": "log", "message": "x"}], "bound": {"object": {"spec": {"x": 1}}}},
            "status": {"phase": "Failed", "message": "why", "lastRunTime": "t",
                "steps": [{"id": "s0"}], "conditions": []}
        }))
        .unwrap();
        let slim = slim_child(child);
        assert_eq!(slim.data["spec"]["bound"]["object"]["spec"]["x"], 1);
        assert!(slim.data["spec"].get("steps").is_none());
        assert_eq!(slim.data["status"]["phase"], "Failed");
        assert_eq!(slim.data["status"]["message"], "why");
        assert!(slim.data["status"].get("steps").is_none());
        assert_eq!(slim.metadata.annotations.unwrap()["a"], "b");
    }

    #[test]
    fn a_listed_flow_too_large_to_read_keeps_its_metadata_and_status_only() {
        let text = format!(
            r#"{{"metadata":{{"name":"c","labels":{{"l":"v"}}}},"spec":{{"x":"{}"}},"status":{{"phase":"Failed"}}}}"#,
            "x".repeat(crate::limits::MAX_FLOW_SPEC_BYTES)
        );
        let listed = as_listed(serde_json::from_str(&text).unwrap());
        assert_eq!(listed.metadata.name.as_deref(), Some("c"));
        assert_eq!(
            listed.data["status"],
            serde_json::json!({"phase": "Failed"})
        );
        let why = listed.data[UNREADABLE].as_str().unwrap().to_string();
        assert!(why.contains("more than the 524288 bytes"), "{why}");
        assert!(listed.data.get("spec").is_none());
        // Cut to what serving reads, it still says why.
        assert_eq!(
            slim_child(listed).data[UNREADABLE].as_str(),
            Some(why.as_str())
        );
        let small: RawFlow =
            serde_json::from_str(r#"{"metadata":{"name":"d"},"spec":{"steps":[]}}"#).unwrap();
        assert_eq!(
            as_listed(small).data,
            serde_json::json!({"spec": {"steps": []}})
        );
    }

    #[test]
    fn a_child_state_is_its_object_and_its_runs_phase_only() {
        let child: DynamicObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c", "annotations": {OBJECT_ANNOTATION: "ops/db1"},
                "generation": 3},
            "spec": {"steps": [{"type": "log", "message": "x"}], "bound": {"object": {}}},
            "status": {"phase": "Failed", "message": "why", "lastRunTime": "t", "steps": [],
                "run": {"id": "r", "generation": 3, "finishedAt": "2026-01-01T00:00:00Z"}}
        }))
        .unwrap();
        let (object, state) = child_state(child);
        assert_eq!(object, "ops/db1");
        assert_eq!(
            state.data,
            serde_json::json!({"generation": 3, "status": {"phase": "Failed", "message": "why",
                "lastRunTime": "t",
                "run": {"generation": 3, "finishedAt": "2026-01-01T00:00:00Z"}}})
        );
        assert_eq!(state.metadata, Default::default());
        let never_ran: DynamicObject =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "d"}})).unwrap();
        let (object, state) = child_state(never_ran);
        assert_eq!((object.as_str(), state.data), ("", serde_json::json!({})));
    }
}
