//! `rollout status|pause|resume|promote|undo`: the status of a bound flow's rollout as
//! `status.bound.rollout` says (written here, with no controller, so every phase can be shown),
//! waiting until it completes, failing when it stopped or on `--timeout`; and the annotation the
//! other verbs set, refused where it would mean nothing; through the admission webhooks, the
//! plugin names who the stamp records. (Who may set it is proven in
//! `controller/tests/admission/rollout.rs`.)

use kube::api::{Patch, PatchParams};
use kube::Client;
use pseudoflow_test_support::{create_flow, flows};
use serde_json::{json, Value};

use crate::support::{lines_until, namespace, pf, spawn_pf, Out};
use pseudoflow_controller::approval::Key;
use pseudoflow_controller::rollout_by::RolloutStamp;
use pseudoflow_test_support::admission::{editor_and_approver, start_webhooks};
use pseudoflow_test_support::approval::{remove_webhooks, wait_webhooks_active};

/// Writes `rollout` as flow `widgets`' `status.bound.rollout`.
async fn set_rollout(client: &Client, ns: &str, rollout: Value) {
    set_rollout_of(client, ns, "widgets", rollout).await
}

/// Writes `rollout` as flow `name`'s `status.bound.rollout`, of the generation it has.
async fn set_rollout_of(client: &Client, ns: &str, name: &str, rollout: Value) {
    let bound = json!({"objects": 3, "creating": 1, "running": 2, "failed": 0, "rollout": rollout});
    set_bound(client, ns, name, bound).await
}

/// Writes `bound` as flow `name`'s `status.bound`, as observed at the generation it has (what a
/// controller would write; none runs here).
async fn set_bound(client: &Client, ns: &str, name: &str, bound: Value) {
    let generation = flows(client, ns)
        .get(name)
        .await
        .unwrap()
        .metadata
        .generation;
    let status = json!({"status": {"phase": "Running", "observedGeneration": generation,
        "bound": bound}});
    flows(client, ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

/// Creates flow `name` bound to the kind `Widget`, which every test's rollout is of.
async fn create_bound(client: &Client, ns: &str, name: &str) {
    let spec = json!({"serviceAccountName": "flow",
        "bind": {"apiVersion": "example.com/v1", "kind": "Widget"},
        "steps": [{"type": "log", "message": "served"}]});
    create_flow(client, ns, name, spec).await;
}

/// Runs the plugin with `args`, which must exit 1 with every one of `says` in its stderr.
async fn fails_saying(args: &[&str], says: &[&str]) -> Out {
    let o = pf(args).await;
    assert_eq!(o.code, 1, "{args:?}: {}", o.stdout);
    for text in says {
        assert!(o.stderr.contains(text), "{text:?} in {}", o.stderr);
    }
    o
}

fn rollout(phase: &str, wave: u32, updated: u32) -> Value {
    json!({"revision": "widgets-2b", "from": "widgets-1a", "phase": phase, "wave": wave,
        "waves": 2, "target": 2, "updated": updated})
}

async fn rollout_annotation(client: &Client, ns: &str) -> Option<String> {
    let f = flows(client, ns).get("widgets").await.unwrap();
    f.metadata
        .annotations
        .unwrap_or_default()
        .get("ops.example.com/rollout")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_status_waits_for_completion_and_fails_when_stopped_or_timed_out() {
    let (client, ns) = namespace("pf-rollout").await;
    create_bound(&client, &ns, "widgets").await;
    create_flow(
        &client,
        &ns,
        "plain",
        json!({"serviceAccountName": "flow",
        "steps": [{"type": "log", "message": "hi"}]}),
    )
    .await;
    // Not yet observed by a controller: waited for (`-w=false`: said, exit 0).
    let o = pf(&["rollout", "status", "widgets", "-n", &ns, "-w=false"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout
            .contains("waiting for the controller to observe generation 1"),
        "{}",
        o.stdout
    );
    // Observed, with no rollout: nothing to wait for.
    let none = json!({"objects": 0, "creating": 0, "running": 0, "failed": 0});
    set_bound(&client, &ns, "widgets", none).await;
    let status_of = ["rollout", "status", "widgets", "-n", &ns];
    fails_saying(
        &[&status_of[..], &["-w=false"]].concat(),
        &["has no rollout yet"],
    )
    .await;
    let plain = ["rollout", "status", "plain", "-n", &ns];
    fails_saying(&plain, &["is not bound to a kind"]).await;

    set_rollout(&client, &ns, rollout("Progressing", 1, 1)).await;
    let o = pf(&["rollout", "status", "widgets", "-n", &ns, "--watch=false"]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout
            .contains("rollout of revision widgets-2b (from widgets-1a)")
            && o.stdout.contains("wave:        1/2")
            && o.stdout.contains("updated:     1/2 objects"),
        "{}",
        o.stdout
    );
    let timeout = [&status_of[..], &["--timeout", "2s"]].concat();
    fails_saying(&timeout, &["timed out after 2s"]).await;

    // Waiting: each change printed, exit 0 once Completed.
    let mut child = spawn_pf(&["rollout", "status", "widgets", "-n", &ns]);
    let stdout = child.stdout.take().unwrap();
    let reading = tokio::spawn(lines_until(stdout, 60, |l| l.contains("rolled out")));
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    set_rollout(&client, &ns, rollout("Progressing", 2, 2)).await;
    set_rollout(&client, &ns, rollout("Completed", 2, 2)).await;
    let seen = reading.await.unwrap();
    assert!(
        seen.contains("(Completed)") && seen.contains("revision widgets-2b rolled out"),
        "{seen}"
    );
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success());

    // A spec change the controller has not observed: the Completed rollout shown is an older
    // generation's, so status waits (here until its timeout).
    let spec = json!({"spec": {"steps": [{"type": "log", "message": "served again"}]}});
    flows(&client, &ns)
        .patch("widgets", &PatchParams::default(), &Patch::Merge(spec))
        .await
        .unwrap();
    let o = fails_saying(&timeout, &["timed out after 2s", "observe generation 2"]).await;
    assert!(o.stdout.contains("phase:       Completed"), "{}", o.stdout);

    // Stopped: exit 1 with the message and the failed objects.
    let mut stopped = rollout("Stopped", 1, 0);
    stopped["failedObjects"] = json!([format!("{ns}/w-1")]);
    stopped["message"] = json!("1 object of revision widgets-2b failed");
    set_rollout(&client, &ns, stopped).await;
    let failed = format!("(failed: {ns}/w-1)");
    let says = ["stopped: 1 object of revision widgets-2b failed", &failed];
    fails_saying(&status_of, &says).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_actions_set_the_annotation_each_time_and_refuse_what_means_nothing() {
    let (client, ns) = namespace("pf-rollout-act").await;
    create_bound(&client, &ns, "widgets").await;
    let promote = ["rollout", "promote", "widgets", "-n", &ns];
    fails_saying(&promote, &["has no rollout yet"]).await;
    set_rollout(&client, &ns, rollout("Progressing", 1, 1)).await;
    let resume = ["rollout", "resume", "widgets", "-n", &ns];
    fails_saying(&resume, &["is not paused (Progressing); nothing asked"]).await;
    assert_eq!(rollout_annotation(&client, &ns).await, None);
    // Set, and set again (removed first: an unchanged annotation is no new request). No webhook
    // here: no stamp, which the plugin warns about.
    for _ in 0..2 {
        let o = pf(&["rollout", "pause", "widgets", "-n", &ns]).await;
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(
            o.stdout
                .contains("widgets rollout of revision widgets-2b: pause asked"),
            "{}",
            o.stdout
        );
        assert!(
            o.stderr.contains("no ops.example.com/rollout-by stamp"),
            "{}",
            o.stderr
        );
        assert_eq!(
            rollout_annotation(&client, &ns).await.as_deref(),
            Some("pause")
        );
    }
    set_rollout(&client, &ns, rollout("Completed", 2, 2)).await;
    fails_saying(&promote, &["nothing to promote"]).await;
    let o = pf(&["rollout", "undo", "widgets", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        rollout_annotation(&client, &ns).await.as_deref(),
        Some("undo")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_webhooks_an_action_is_stamped_and_the_plugin_names_who_asked() {
    let (client, ns) = namespace("pf-rollout-by").await;
    editor_and_approver(&client, &ns).await;
    // Named as the webhook probe expects.
    create_bound(&client, &ns, "gated").await;
    set_rollout_of(&client, &ns, "gated", rollout("Progressing", 1, 1)).await;
    let key = Key::random();
    let hooks = start_webhooks(&client, &ns, &key).await;
    wait_webhooks_active(&ns).await;
    for _ in 0..2 {
        let o = pf(&["rollout", "promote", "gated", "-n", &ns]).await;
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(!o.stderr.contains("warning"), "{}", o.stderr);
        let f = flows(&client, &ns).get("gated").await.unwrap();
        let ann = f.metadata.annotations.unwrap_or_default();
        let stamp = RolloutStamp::verify(&key, &ns, "gated", &ann["ops.example.com/rollout-by"])
            .expect("stamped by the webhook");
        assert_eq!(stamp.revision, "widgets-2b");
        let said = format!(
            "gated rollout of revision widgets-2b: promote asked by {}",
            stamp.user
        );
        assert!(o.stdout.contains(&said), "{}", o.stdout);
    }
    remove_webhooks(&client, &hooks).await;
}
