//! What a person sees with kubectl, on testenv: `kubectl get pf` columns, `kubectl wait
//! --for=condition=Ready`, an Event per step start and end, `kubectl logs` of a step's Job, and a
//! step's output of more than 256 KiB reaching later steps whole.

use serde_json::json;

use crate::common::harness::{config_map, create_flow, setup, wait_done};
use crate::common::kubectl;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_kib_output_reaches_the_next_step_and_kubectl_shows_and_waits() {
    let (client, ns) = setup("kubectl").await;
    // 300 KiB of output: far over the termination message, so it travels through a result
    // ConfigMap the executor writes under the flow's identity.
    create_flow(&client, &ns, "big", json!({"serviceAccountName": "flow", "steps": [
        {"type": "exec", "cmd": "head -c 307200 /dev/zero | tr '\\0' x", "var": "big"},
        {"type": "apply", "manifests": format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: sizes, namespace: {ns}}}\ndata:\n  length: \"n=${{big | length}}\"\n  tail: \"${{big[-3:]}}\"\n")},
    ]}))
    .await;
    // kubectl wait returns once the flow is Ready (Succeeded), like for any built-in kind.
    // (kubectl blocks: off the runtime, so the in-process controller keeps working.)
    let wait_ns = ns.clone();
    let (ok, out) = tokio::task::spawn_blocking(move || {
        kubectl(&[
            "wait",
            "--for=condition=Ready",
            "-n",
            &wait_ns,
            "pseudoflow/big",
            "--timeout=90s",
        ])
    })
    .await
    .unwrap();
    assert!(ok, "kubectl wait: {out}");
    assert!(out.contains("condition met"), "{out}");
    let status = wait_done(&client, &ns, "big").await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let sizes = config_map(&client, &ns, "sizes").await.expect("sizes");
    let data = sizes.data.unwrap();
    assert_eq!(data["length"], "n=307200", "the whole output arrived");
    assert_eq!(data["tail"], "xxx");

    // An Event per step start and end, each naming the step.
    let (ok, out) = kubectl(&[
        "get",
        "events",
        "-n",
        &ns,
        "--field-selector",
        "involvedObject.name=big",
    ]);
    assert!(ok, "{out}");
    for (reason, path) in [
        ("StepStarted", "spec.steps[0]"),
        ("StepSucceeded", "spec.steps[0]"),
        ("StepStarted", "spec.steps[1]"),
        ("StepSucceeded", "spec.steps[1]"),
        ("RunSucceeded", ""),
    ] {
        assert!(
            out.lines().any(|l| l.contains(reason) && l.contains(path)),
            "no {reason} Event for {path:?}:\n{out}"
        );
    }

    // The executor's JSON log of a step, as docs/operations.md tells people to read it.
    let (ok, jobs) = kubectl(&[
        "get",
        "jobs",
        "-n",
        &ns,
        "-l",
        "ops.example.com/flow=big",
        "-o",
        "name",
    ]);
    assert!(ok, "{jobs}");
    let logs: Vec<String> = jobs
        .lines()
        .map(|job| {
            let (ok, out) = kubectl(&["logs", "-n", &ns, job]);
            assert!(ok, "kubectl logs {job}: {out}");
            out
        })
        .collect();
    assert!(
        logs.iter()
            .any(|l| l.contains(r#""path":"spec.steps[0]""#)
                && l.contains(r#""message":"finished""#)),
        "{logs:#?}"
    );

    let (ok, out) = kubectl(&["get", "pf", "-n", &ns]);
    assert!(ok, "{out}");
    let header = out.lines().next().unwrap();
    for col in ["NAME", "PHASE", "STEP", "PROGRESS", "AGE"] {
        assert!(header.contains(col), "column {col} missing: {out}");
    }
    let row = out.lines().find(|l| l.starts_with("big ")).unwrap();
    assert!(row.contains("Succeeded") && row.contains("2/2"), "{out}");
}
