use serde_json::json;

use super::*;

fn flow(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "ops.example.com/v1alpha1",
        "kind": "PseudoFlow",
        "metadata": {"name": name, "namespace": "team"},
        "spec": spec,
    })
}

fn request(
    operation: &str,
    sub: Option<&str>,
    object: Value,
    old: Option<Value>,
) -> AdmissionRequest<DynamicObject> {
    let user = json!({"username": "alice", "groups": ["devs"]});
    super::testing::request(operation, sub, user, object, old)
}

/// A flow with two typos, one nested inside a loop's `steps:` where the CRD schema cannot reach.
fn bad() -> Value {
    flow(
        "bad",
        json!({"steps": [
            {"type": "loop", "forEach": ["a"], "steps": [
                {"type": "sleep", "seconds": "ten"},
                {"type": "aply", "manifests": []}
            ]},
        ]}),
    )
}

fn good() -> Value {
    flow("good", json!({"steps": [{"type": "sleep", "seconds": 1}]}))
}

#[test]
fn a_bad_flow_is_refused_with_every_problem_and_its_path() {
    let resp = review_request(&request("CREATE", None, bad(), None));
    assert!(!resp.allowed);
    assert_eq!(resp.uid, "u-1");
    let msg = &resp.result.message;
    assert!(
        msg.starts_with("PseudoFlow \"bad\" is invalid (2 problems):"),
        "{msg}"
    );
    assert!(
        msg.contains("\n  spec.steps[0].steps[0].seconds: "),
        "{msg}"
    );
    assert!(msg.contains("\n  spec.steps[0].steps[1].type: "), "{msg}");
    assert!(msg.contains("apply"), "the suggestion: {msg}");
}

#[test]
fn the_same_diagnostics_as_the_compiler() {
    let obj = bad();
    let errors: Vec<String> = compile(
        &FlowId {
            name: "bad",
            namespace: Some("team"),
        },
        &obj["spec"],
    )
    .err()
    .unwrap()
    .errors()
    .map(|d| format!("{}: {}", d.path, d.message))
    .collect();
    let resp = review_request(&request("CREATE", None, obj, None));
    assert_eq!(resp.result.message, refusal("bad", &errors));
}

#[test]
fn a_good_flow_passes_on_create_and_update() {
    assert!(review_request(&request("CREATE", None, good(), None)).allowed);
    let mut changed = good();
    changed["spec"]["steps"][0]["seconds"] = json!(2);
    assert!(review_request(&request("UPDATE", None, changed, Some(good()))).allowed);
}

#[test]
fn an_update_making_a_good_flow_bad_is_refused() {
    let mut b = bad();
    b["metadata"]["name"] = json!("good");
    assert!(!review_request(&request("UPDATE", None, b, Some(good()))).allowed);
}

#[test]
fn status_updates_deletes_and_spec_preserving_updates_are_never_blocked() {
    // The status subresource, even of an invalid flow.
    assert!(review_request(&request("UPDATE", Some("status"), bad(), Some(bad()))).allowed);
    // A delete.
    assert!(review_request(&request("DELETE", None, bad(), Some(bad()))).allowed);
    // Removing a finalizer or adding a label to a flow that is already invalid.
    let mut labelled = bad();
    labelled["metadata"]["labels"] = json!({"team": "a"});
    assert!(review_request(&request("UPDATE", None, labelled, Some(bad()))).allowed);
    // A flow being deleted.
    let mut deleting = bad();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    deleting["spec"]["steps"] = json!([{"type": "nope"}]);
    assert!(review_request(&request("UPDATE", None, deleting, Some(bad()))).allowed);
}

#[test]
fn a_flow_larger_than_the_controller_reads_is_refused_naming_the_limit() {
    let spec = |n: usize| json!({"steps": [{"type": "log", "message": "x".repeat(n)}]});
    let limit = crate::limits::MAX_FLOW_SPEC_BYTES;
    let fits = review_request(&request("CREATE", None, flow("f", spec(limit - 100)), None));
    assert!(fits.allowed, "{:?}", fits.result);
    let big = review_request(&request("CREATE", None, flow("b", spec(limit)), None));
    assert!(!big.allowed);
    let message = big.result.message;
    assert!(
        message.contains("spec: the flow's spec takes 524327 bytes, more than the 524288"),
        "{message}"
    );
}

#[test]
fn a_flow_without_a_spec_is_refused() {
    let mut obj = good();
    obj.as_object_mut().unwrap().remove("spec");
    assert!(!review_request(&request("CREATE", None, obj, None)).allowed);
}

#[test]
fn a_long_list_is_cut_and_counted() {
    let errors: Vec<String> = (0..60).map(|i| format!("spec.steps[{i}]: x")).collect();
    let msg = refusal("f", &errors);
    assert!(msg.contains("(60 problems)"), "{msg}");
    assert!(msg.ends_with("... and 10 more"), "{msg}");
    assert_eq!(msg.lines().count(), 1 + MAX_LISTED + 1);
}

#[tokio::test]
async fn approval_questions_are_answered_only_to_the_api_server_or_any_caller_by_choice() {
    let client = || {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    };
    let key = crate::approval::Key::random();
    for webhook in [
        Webhook::new(client()),
        Webhook::with_key(client(), key.clone()),
    ] {
        assert_eq!(
            webhook.may_ask_about_approvals(Some(Caller::ApiServer)),
            Ok(())
        );
        for caller in [Some(Caller::Unauthenticated), None] {
            assert_eq!(
                webhook.may_ask_about_approvals(caller),
                Err(UNAUTHENTICATED_APPROVAL.to_string())
            );
        }
    }
    let any = Webhook::for_any_caller(client(), key);
    assert_eq!(
        any.may_ask_about_approvals(Some(Caller::Unauthenticated)),
        Ok(())
    );
}

#[tokio::test]
async fn a_review_waits_for_its_share_of_the_decode_budget_and_past_the_wait_is_refused_as_busy() {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let webhook = Webhook::new(kube::Client::try_from(config).unwrap());
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1", "name": "good", "namespace": "team", "operation": "CREATE",
            "kind": {"group": "ops.example.com", "version": "v1alpha1", "kind": "PseudoFlow"},
            "resource": {"group": "ops.example.com", "version": "v1alpha1", "resource": "pseudoflows"},
            "userInfo": {"username": "alice"}, "object": good(),
        }
    }))
    .unwrap();
    let all = DECODE_BUDGET_BYTES as u32;
    // Others hold the whole budget for 100 ms: the review waits, then is decoded.
    let held = webhook
        .decoding
        .clone()
        .acquire_many_owned(all)
        .await
        .unwrap();
    let (w, b) = (webhook.clone(), body.clone());
    let waiting = tokio::spawn(async move { w.decode(&b).await.map(|_| ()) });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    drop(held);
    assert!(waiting.await.unwrap().is_ok());
    assert_eq!(webhook.decoding.available_permits(), DECODE_BUDGET_BYTES);
    // Held past the wait: refused, naming why, with the request's uid.
    let _held = webhook
        .decoding
        .clone()
        .acquire_many_owned(all)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let busy = webhook.decode(&body).await.err().unwrap();
    assert!(started.elapsed() >= DECODE_WAIT);
    assert!(!busy.allowed);
    assert_eq!(busy.uid, "u-1");
    assert!(
        busy.result.message.contains("try again"),
        "{}",
        busy.result.message
    );
}
