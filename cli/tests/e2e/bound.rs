//! `list` and `get` of a flow bound to a kind: its objects with their runs, from its child flows
//! or (`bind.record: Object`) from the objects themselves.

use kube::Client;
use pseudoflow_test_support::{apply, create_flow, TestKind};
use serde_json::json;

use crate::support::{namespace, pf, pf_as, start_impersonating_controller, viewer_kubeconfig};

/// A namespace `prefix-…` with the kind `Thing`, rights on it for its ServiceAccount `flow`, a
/// controller, and the flow `things` bound to it (`record`: `bind.record`, none: the default)
/// serving one good object and one whose run fails (a version that is no valid name part).
async fn things_served(
    prefix: &str,
    record: Option<&str>,
) -> (Client, String, tokio::task::JoinHandle<()>) {
    let (client, ns) = namespace(prefix).await;
    let things = TestKind::new("cli.bind.example.com", "Thing");
    things.install(&client, &ns).await;
    apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "things", "namespace": ns}, "rules": things.bound_rules()}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "things", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "things"},
        "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]}),
    )
    .await;
    let ctl = start_impersonating_controller(&client, &ns).await;
    let mut bind = json!({"apiVersion": "cli.bind.example.com/v1", "kind": "Thing"});
    if let Some(r) = record {
        bind["record"] = json!(r);
    }
    create_flow(&client, &ns, "things", json!({"serviceAccountName": "flow", "bind": bind,
        "steps": [{"type": "apply", "name": "made", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "${object.metadata.name}-${object.spec.version}", "namespace": ns}}}]}))
    .await;
    for (name, version) in [("good", "one"), ("bad", "NOT_A_NAME")] {
        apply(
            &client,
            things.object(&ns, name, json!({"version": version})),
        )
        .await;
    }
    (client, ns, ctl)
}

/// Once `things` has one object running and one failed: `list` counts them (`1/2 objects`),
/// and `get things` succeeds and sums them up; its output.
async fn served_listed_and_got(client: &Client, ns: &str) -> String {
    pseudoflow_test_support::wait_status(client, ns, "things", 120, "both objects done", |st| {
        st["bound"]["running"] == 1 && st["bound"]["failed"] == 1
    })
    .await;

    let o = pf(&["list", "-n", ns]).await;
    let listed = o
        .stdout
        .lines()
        .find(|l| l.contains(" things "))
        .unwrap_or("");
    assert!(listed.contains("1/2 objects"), "{}", o.stdout);

    let o = pf(&["get", "things", "-n", ns]).await;
    println!("{}", o.stdout);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let out = o.stdout;
    assert!(
        out.contains("2 Thing object(s): 1 Running, 0 Creating, 1 Failed"),
        "{out}"
    );
    out
}

/// The row of `object` (of namespace `ns`) in `get`'s output `out`.
fn row(out: &str, ns: &str, object: &str) -> String {
    let key = format!("{ns}/{object} ");
    out.lines()
        .find(|l| l.starts_with(&key))
        .unwrap_or_else(|| panic!("no row for {object}: {out}"))
        .to_string()
}

/// The REVISION cell of `object`'s row in `get`'s output `out` (the column under its header).
fn revision_cell(out: &str, ns: &str, object: &str) -> String {
    let header = out
        .lines()
        .find(|l| l.starts_with("OBJECT"))
        .unwrap_or_else(|| panic!("no header: {out}"));
    let at = header.find("REVISION").expect("a REVISION column");
    let row = row(out, ns, object);
    let cell = row.get(at..).unwrap_or_default();
    cell.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `get` of a flow bound to a kind: its objects, each with the flow serving it and its latest
/// run (the failed one with why), instead of a step tree it does not have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_of_a_bound_flow_lists_its_objects_with_their_runs() {
    let (client, ns, ctl) = things_served("pf-bound", Some("Child")).await;
    let out = &served_listed_and_got(&client, &ns).await;
    assert!(!out.contains("no step has run yet"), "{out}");
    let good = row(out, &ns, "good");
    assert!(good.contains("Succeeded") && good.contains("ago"), "{good}");
    assert!(good.contains("things-"), "the flow serving it: {good}");
    let bad = row(out, &ns, "bad");
    assert!(bad.contains("Failed"), "{bad}");
    assert!(
        bad.contains("spec.steps[0]") && bad.contains("bad-NOT_A_NAME"),
        "why it failed: {bad}"
    );
    assert!(
        !good.contains("spec.steps"),
        "no message for a run that succeeded: {good}"
    );
    // Both served by the flow's first revision, failed or not.
    for o in ["good", "bad"] {
        assert_eq!(revision_cell(out, &ns, o), "1", "{out}");
    }
    ctl.abort();
}

/// `get` of a flow bound to a kind and recorded in its objects (`bind.record` unset, which the
/// controller resolves to `Object` for this flow, every step running in it, and shows in
/// `status.bound.record`): it has no child flow, so each object's row comes from the object
/// itself (its status and this flow's served mark), and a served object that failed is a row,
/// not a `not served` line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_of_a_bound_flow_recorded_in_its_objects_lists_them_from_the_objects() {
    let (client, ns, ctl) = things_served("pf-inobj", None).await;
    let out = &served_listed_and_got(&client, &ns).await;
    assert!(!out.contains("no object of the kind matches yet"), "{out}");
    assert!(!out.contains("not served"), "both were served: {out}");
    let good = row(out, &ns, "good");
    assert!(good.contains("(in object)"), "no child flow: {good}");
    assert!(good.contains("Running") && good.contains("ago"), "{good}");
    assert!(
        !good.contains("spec.steps"),
        "no message for a run that succeeded: {good}"
    );
    let bad = row(out, &ns, "bad");
    assert!(
        bad.contains("(in object)") && bad.contains("Failed"),
        "{bad}"
    );
    // Both served by the flow's first revision, as their served marks say.
    for o in ["good", "bad"] {
        assert_eq!(revision_cell(out, &ns, o), "1", "{out}");
    }
    assert!(
        bad.contains("spec.steps[0]") && bad.contains("bad-NOT_A_NAME"),
        "why it failed: {bad}"
    );

    // A user who may read the flow but not list Things: a line naming the right, no crash.
    let viewer = viewer_kubeconfig(&client, &ns).await;
    let o = pf_as(viewer, &["get", "things", "-n", &ns]).await;
    assert_eq!(o.code, 0, "the flow is still shown: {}", o.stderr);
    let what = "things.cli.bind.example.com";
    assert!(
        o.stdout.contains(&format!(
            "cannot list {what} in namespace {ns}: you lack the right to list {what}"
        )),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("2 Thing object(s)"), "{}", o.stdout);
    assert!(
        o.stdout
            .contains(&format!("failed: {ns}/bad: spec.steps[0]")),
        "the status's latest failures, not called unserved: {}",
        o.stdout
    );
    assert!(!o.stdout.contains("not served"), "{}", o.stdout);
    assert!(
        !o.stdout.contains("no object of the kind matches yet"),
        "{}",
        o.stdout
    );
    ctl.abort();
}
